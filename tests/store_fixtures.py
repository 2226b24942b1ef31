"""Databases for store tests: a fresh SQLite file, and a fresh PostgreSQL schema, per test.

Both are built through the Alembic migrations, so a schema change without a migration fails.
"""

from __future__ import annotations

import asyncio
import os
import re
import uuid
import warnings
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from pathlib import Path

import asyncpg
import pytest
from sqlalchemy import event, text

from ira.runtime.store.database import Database
from ira.runtime.store.migrate import upgrade
from tests.services import require_service

DEFAULT_POSTGRES_URL = "postgresql://postgres@127.0.0.1:5432/test"


def postgres_test_url() -> str:
    return os.environ.get("IRA_TEST_POSTGRES_URL", DEFAULT_POSTGRES_URL)


async def _create_schema(url: str, schema: str) -> None:
    try:
        conn = await asyncpg.connect(url, timeout=3)
    except (OSError, asyncpg.PostgresError) as exc:
        require_service("postgresql", f"{url} unreachable: {exc}")
        raise
    try:
        await conn.execute(f'CREATE SCHEMA "{schema}"')
    finally:
        await conn.close()


DROP_LOCK_TIMEOUT = "10s"
"""How long a test's teardown waits for locks in its schema before it ends their holders."""

_HOLDERS = """
    SELECT DISTINCT a.pid, a.state, left(a.query, 200) AS query
    FROM pg_locks l JOIN pg_class c ON c.oid = l.relation JOIN pg_namespace n ON n.oid = c.relnamespace
    JOIN pg_stat_activity a ON a.pid = l.pid
    WHERE n.nspname = $1 AND l.pid <> pg_backend_pid()
"""


async def _drop_schema(url: str, schema: str) -> None:
    """Drop a test's schema. Its test has closed its pool; a server backend still holding a lock
    in the schema (a client that went away mid-statement is noticed by the server only when it
    next uses the socket) would make the DROP wait forever, a hang past pytest's timeout that
    shows only an idle event loop. Wait ``DROP_LOCK_TIMEOUT``, then warn with what held the
    locks, end those backends and drop again."""
    conn = await asyncpg.connect(url, timeout=3)
    try:
        await conn.execute(f"SET lock_timeout = '{DROP_LOCK_TIMEOUT}'")
        try:
            await conn.execute(f'DROP SCHEMA "{schema}" CASCADE')
        except asyncpg.LockNotAvailableError:
            holders = await conn.fetch(_HOLDERS, schema)
            warnings.warn(f"schema {schema}: backends still held locks at teardown, ended: "
                          f"{[dict(h) for h in holders]}", stacklevel=1)
            for holder in holders:
                await conn.execute("SELECT pg_terminate_backend($1)", holder["pid"])
            await conn.execute("SET lock_timeout = 0")
            await conn.execute(f'DROP SCHEMA "{schema}" CASCADE')
    finally:
        await conn.close()


async def open_database(backend: str, tmp_path: Path) -> tuple[Database, str | None]:
    """A migrated database of ``backend``; returns it and the PostgreSQL schema to drop."""
    if backend == "sqlite":
        db = Database.create(f"sqlite:///{tmp_path / 'ira.db'}")
        await upgrade(db)
        return db, None
    schema = f"t_{uuid.uuid4().hex[:12]}"
    await _create_schema(postgres_test_url(), schema)
    db = Database.create(postgres_test_url(), schema=schema, pool_size=60)
    await upgrade(db)
    return db, schema


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
async def db(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Database]:
    """The contract suites run once per backend."""
    database, schema = await open_database(request.param, tmp_path)
    try:
        yield database
    finally:
        await database.close()
        if schema:
            await _drop_schema(postgres_test_url(), schema)


def count_opened(db: Database, kind: str) -> list[str]:
    """From now on, one entry per ``db.<kind>()`` opened (``transaction``, ``reader`` ...)."""
    opened: list[str] = []
    original = getattr(db, kind)

    def counted():  # type: ignore[no-untyped-def]
        opened.append(kind)
        return original()

    setattr(db, kind, counted)
    return opened


@contextmanager
def statements(db: Database) -> Iterator[list[str]]:
    """Every SQL statement ``db`` executes while the block runs, whitespace folded."""
    seen: list[str] = []

    def record(conn, cursor, statement, params, context, executemany):  # type: ignore[no-untyped-def]
        seen.append(re.sub(r"\s+", " ", statement))

    event.listen(db.engine.sync_engine, "before_cursor_execute", record)
    try:
        yield seen
    finally:
        event.remove(db.engine.sync_engine, "before_cursor_execute", record)


_BLOCKED_BY = text("SELECT count(*) FROM pg_stat_activity WHERE CAST(:holder AS integer) = ANY(pg_blocking_pids(pid))")


async def until_blocked_by(db: Database, holder_pid: int, waiter: str) -> None:
    """PostgreSQL: until a statement waits on a lock the backend ``holder_pid`` holds (bounded: 10 s)."""
    async with db.reader() as watcher:
        for _ in range(500):
            if (await watcher.execute(_BLOCKED_BY, {"holder": holder_pid})).scalar_one():
                return
            await asyncio.sleep(0.02)
    raise AssertionError(f"{waiter} never waited for the lock")
