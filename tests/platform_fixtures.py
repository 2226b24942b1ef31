"""A real Platform (broker, Redis, SQLite) for tests of roles and pages, built as a worker builds it."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest_asyncio

from ira.infra.tansu import EmbeddedKafka
from ira.runtime.platform import Platform
from ira.runtime.settings import load_settings
from ira.runtime.stack import open_platform
from ira.runtime.store.migrate import upgrade


@pytest_asyncio.fixture(loop_scope="session")
async def platform(kafka: EmbeddedKafka, redis_url: str, tmp_path: Path) -> AsyncIterator[Platform]:
    """Default settings (dev tokens, tenant ``demo``) on the session broker and a fresh SQLite file."""
    settings = load_settings({"IRA_DATABASE_URL": f"sqlite:///{tmp_path / 'ira.db'}", "IRA_REDIS_URL": redis_url,
                              "IRA_KAFKA_BOOTSTRAP": kafka.bootstrap, "IRA_DATA_DIR": str(tmp_path)})
    async with open_platform(settings, embedded=False, say=lambda _m: None) as built:
        await upgrade(built.db)
        yield built
