"""The store tests' own teardown: a schema is dropped even when a backend still holds its locks."""

from __future__ import annotations

import uuid

import asyncpg
import pytest

from tests.store_fixtures import _create_schema, _drop_schema, postgres_test_url

pytestmark = pytest.mark.postgres


async def test_a_schema_is_dropped_although_a_backend_still_holds_a_lock_in_it(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("tests.store_fixtures.DROP_LOCK_TIMEOUT", "200ms")
    url, schema = postgres_test_url(), f"t_{uuid.uuid4().hex[:12]}"
    await _create_schema(url, schema)
    holder = await asyncpg.connect(url)
    try:
        await holder.execute(f'CREATE TABLE "{schema}".t (id int)')
        await holder.execute("BEGIN")
        await holder.execute(f'LOCK TABLE "{schema}".t IN ACCESS EXCLUSIVE MODE')  # held, never committed
        with pytest.warns(UserWarning, match="still held locks"):
            await _drop_schema(url, schema)
        checker = await asyncpg.connect(url)
        try:
            assert await checker.fetchval("SELECT count(*) FROM pg_namespace WHERE nspname = $1", schema) == 0
        finally:
            await checker.close()
    finally:
        holder.terminate()
