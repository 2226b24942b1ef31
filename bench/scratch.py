"""A migrated, empty database for one benchmark run: a SQLite file, or a throwaway PostgreSQL
schema that is dropped afterwards. Shared by the bench scripts (run as ``python bench/x.py``)."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import asyncpg

from ira.runtime.store.database import Database
from ira.runtime.store.migrate import upgrade


async def _postgres(url: str, sql: str) -> None:
    conn = await asyncpg.connect(url.replace("postgresql+asyncpg", "postgresql"))
    try:
        await conn.execute(sql)
    finally:
        await conn.close()


@asynccontextmanager
async def scratch_database(backend: str, url: str | None, workdir: Path, *, pool_size: int = 40
                           ) -> AsyncIterator[Database]:
    """``backend`` is ``sqlite`` (a new file under ``workdir``) or ``postgresql`` (a new schema in ``url``)."""
    schema = None
    if backend == "sqlite":
        db = Database.create(f"sqlite:///{workdir / f'bench-{uuid.uuid4().hex[:8]}.db'}")
    else:
        assert url is not None, "PostgreSQL needs --database-url"
        schema = f"bench_{uuid.uuid4().hex[:10]}"
        await _postgres(url, f'CREATE SCHEMA "{schema}"')
        db = Database.create(url, schema=schema, pool_size=pool_size)
    try:
        await upgrade(db)
        yield db
    finally:
        await db.close()
        if schema:
            await _postgres(str(url), f'DROP SCHEMA "{schema}" CASCADE')
