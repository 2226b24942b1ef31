"""PostgreSQL connections the server closed while they idled in the pool (a restart, a failover,
``pg_terminate_backend``) are replaced before a transaction or a read uses them, without a
ping round trip per checkout; one cut under a statement is reported as a lost connection."""

from __future__ import annotations

import asyncpg
import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection

from ira.runtime.bus.record import is_lost_connection
from ira.runtime.store.database import Database
from tests.eventually import eventually
from tests.store_fixtures import postgres_test_url

pytestmark = [pytest.mark.postgres, pytest.mark.parametrize("db", ["postgresql"], indirect=True)]


async def _pid(conn: AsyncConnection) -> int:
    return int((await conn.execute(text("SELECT pg_backend_pid()"))).scalar_one())


async def _terminate(pid: int) -> None:
    killer = await asyncpg.connect(postgres_test_url())
    try:
        assert await killer.fetchval("SELECT pg_terminate_backend($1)", pid)
    finally:
        await killer.close()


async def _pooled_connection_cut(db: Database) -> tuple[int, asyncpg.Connection]:
    """Use a connection, give it back to the pool, terminate its server process and wait until
    the client has read the close: the pool now holds a dead connection."""
    async with db.transaction() as conn:
        pid = await _pid(conn)
        driver = (await conn.get_raw_connection()).driver_connection
    await _terminate(pid)
    await eventually(driver.is_closed, timeout=10)
    return pid, driver


async def test_a_transaction_after_the_server_closed_its_pooled_connection_runs_on_a_new_one(db: Database) -> None:
    # Given a pooled connection whose server process was terminated while it idled
    cut, _ = await _pooled_connection_cut(db)

    # Then the next transaction runs, and commits, on another connection
    async with db.transaction() as conn:
        pid = await _pid(conn)
        await conn.execute(text("CREATE TEMPORARY TABLE probe (x int)"))
    assert pid != cut


async def test_a_read_after_the_server_closed_its_pooled_connection_runs_on_a_new_one(db: Database) -> None:
    cut, _ = await _pooled_connection_cut(db)

    async with db.reader() as conn:
        assert await _pid(conn) != cut


async def test_a_connection_cut_under_a_transaction_is_reported_lost_and_the_next_one_runs(db: Database) -> None:
    # Given a transaction whose connection is terminated between two of its statements
    with pytest.raises(Exception) as failed:
        async with db.transaction() as conn:
            cut = await _pid(conn)
            await _terminate(cut)
            await conn.execute(text("SELECT 1"))

    # Then the failure says the connection was lost (callers retry that), and a retry runs
    assert is_lost_connection(failed.value), repr(failed.value)
    async with db.transaction() as conn:
        assert await _pid(conn) != cut
