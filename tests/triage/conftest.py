"""Fixtures shared by the triage tests that run a consumer on the real broker."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from ira.infra.tansu import EmbeddedKafka
from ira.runtime.bus.producer import BusProducer
from ira.runtime.store.database import Database
from tests.store_fixtures import open_database


@pytest.fixture
async def producer(kafka: EmbeddedKafka) -> AsyncIterator[BusProducer]:
    async with BusProducer(kafka.bootstrap) as bus_producer:
        yield bus_producer


@pytest.fixture
async def sqlite_db(tmp_path: Path) -> AsyncIterator[Database]:
    database, _ = await open_database("sqlite", tmp_path)
    yield database
    await database.close()
