"""PostgreSQL write transactions and reads on kept connections (pg_kept).

What must hold: a connection is reused across transactions, also after a block that failed
and rolled back; one whose server backend was terminated while it idled, or whose statement was
cancelled mid-flight, is never used again and the next transaction commits on a new one; no
more than ``keep`` stay checked out between transactions, and closing the database returns them.
Reads keep their own connections the same way, with no transaction around their statements.
The pool is fixed: no more than ``pool_size`` connections are opened, and none is closed for
coming back while its kind keeps enough (a second burst takes the first's); a writer takes a
connection reads keep idle rather than wait for the pool.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import asyncpg
import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection

from ira.runtime.store.database import Database
from tests.eventually import eventually
from tests.store_fixtures import _create_schema, _drop_schema, open_database, postgres_test_url

pytestmark = pytest.mark.postgres


@pytest.fixture
async def pg(tmp_path: Path) -> AsyncIterator[Database]:
    db, schema = await open_database("postgresql", tmp_path)
    try:
        async with db.transaction() as conn:
            await conn.execute(text("CREATE TABLE counter (n INTEGER NOT NULL)"))
            await conn.execute(text("INSERT INTO counter VALUES (0)"))
        yield db
    finally:
        await db.close()
        assert schema is not None
        await _drop_schema(postgres_test_url(), schema)


@pytest.fixture
async def four() -> AsyncIterator[Database]:
    """A database of four connections at most, two kept of each kind."""
    schema = f"t_{uuid.uuid4().hex[:12]}"
    await _create_schema(postgres_test_url(), schema)
    db = Database.create(postgres_test_url(), schema=schema, pool_size=4)
    try:
        yield db
    finally:
        await db.close()
        await _drop_schema(postgres_test_url(), schema)


async def _count(db: Database) -> int:
    async with db.reader() as conn:
        return int((await conn.execute(text("SELECT n FROM counter"))).scalar_one())


async def _backend_pid(conn) -> int:  # type: ignore[no-untyped-def]
    return int((await conn.execute(text("SELECT pg_backend_pid()"))).scalar_one())


async def test_a_connection_is_kept_across_transactions_and_after_a_rollback(pg: Database) -> None:
    async with pg.transaction() as conn:
        first = await _backend_pid(conn)
        await conn.execute(text("UPDATE counter SET n = n + 1"))
    with pytest.raises(RuntimeError):
        async with pg.transaction() as conn:
            assert await _backend_pid(conn) == first
            await conn.execute(text("UPDATE counter SET n = n + 10"))
            raise RuntimeError("refused")
    async with pg.transaction() as conn:
        assert await _backend_pid(conn) == first
        await conn.execute(text("UPDATE counter SET n = n + 2"))
    assert await _count(pg) == 3


@pytest.mark.parametrize("use", ["transaction", "reader"])
async def test_a_connection_the_server_closed_while_idle_is_not_used_again(pg: Database, use: str) -> None:
    kept = pg._pg_kept
    assert kept is not None
    opened = pg.transaction if use == "transaction" else pg.reader
    async with opened() as conn:
        first = await _backend_pid(conn)
    await _terminated(first, kept._idle if use == "transaction" else kept._reading)
    async with opened() as conn:
        assert await _backend_pid(conn) != first
        assert (await conn.execute(text("SELECT n FROM counter"))).scalar_one() == 0


async def _terminated(pid: int, kept: list[AsyncConnection]) -> None:
    """End server backend ``pid`` and wait until asyncpg saw every ``kept`` connection closed (it
    reads the close while the connection idles on the event loop)."""
    admin = await asyncpg.connect(postgres_test_url())
    try:
        assert await admin.fetchval("SELECT pg_terminate_backend($1)", pid)
    finally:
        await admin.close()
    await eventually(lambda: all(c.sync_connection.connection.dbapi_connection._connection.is_closed()  # type: ignore[union-attr]
                                 for c in kept), message="asyncpg read the server's close")


async def test_a_write_cancelled_mid_statement_leaves_its_connection_and_the_next_one_commits(pg: Database) -> None:
    async with pg.transaction() as conn:
        first = await _backend_pid(conn)
    started = asyncio.Event()

    async def sleeping() -> None:
        async with pg.transaction() as conn:
            await conn.execute(text("UPDATE counter SET n = n + 10"))
            started.set()
            await conn.execute(text("SELECT pg_sleep(30)"))

    task = asyncio.create_task(sleeping())
    await asyncio.wait_for(started.wait(), timeout=10)
    admin = await asyncpg.connect(postgres_test_url())
    try:  # the server runs the sleep: the statement is in flight when the cancellation comes
        await eventually(lambda: admin.fetchval(
            "SELECT count(*) FROM pg_stat_activity WHERE query = 'SELECT pg_sleep(30)' AND state = 'active'"),
            message="the sleep runs on the server")
    finally:
        await admin.close()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(task, timeout=10)
    async with pg.transaction() as conn:
        assert await _backend_pid(conn) != first
        await conn.execute(text("UPDATE counter SET n = n + 1"))
    assert await _count(pg) == 1  # the cancelled write was rolled back


async def test_at_most_keep_connections_stay_out_and_close_returns_them(pg: Database) -> None:
    writers = pg._pg_kept
    assert writers is not None
    gate = asyncio.Event()

    async def write() -> None:
        async with pg.transaction() as conn:
            await conn.execute(text("UPDATE counter SET n = n + 1"))
            await gate.wait()

    many = writers._keep + 5
    tasks = [asyncio.create_task(write()) for _ in range(many)]
    await eventually(lambda: pg.engine.pool.checkedout() >= many,  # type: ignore[attr-defined]
                     message=f"{many} transactions hold a connection each")
    gate.set()
    await asyncio.wait_for(asyncio.gather(*tasks), timeout=30)
    assert writers.idle == writers._keep
    assert pg.engine.pool.checkedout() == writers._keep  # type: ignore[attr-defined]
    assert await _count(pg) == many  # a read with none kept for reads takes a writer's idle one
    assert (writers.idle, len(writers._reading)) == (writers._keep - 1, 1)
    assert pg.engine.pool.checkedout() == writers._keep  # type: ignore[attr-defined]
    await writers.close()
    assert pg.engine.pool.checkedout() == 0  # type: ignore[attr-defined]


async def test_a_read_is_kept_for_the_next_read_and_runs_each_statement_on_its_own(pg: Database) -> None:
    async with pg.reader() as conn:
        first = await _backend_pid(conn)
        one, two = [(await conn.execute(text("SELECT txid_current()"))).scalar_one() for _ in range(2)]
        assert one != two  # autocommit: no transaction around the read's statements
    async with pg.transaction() as conn:
        await conn.execute(text("UPDATE counter SET n = n + 7"))
    async with pg.reader() as conn:
        assert await _backend_pid(conn) == first
        assert (await conn.execute(text("SELECT n FROM counter"))).scalar_one() == 7


async def test_a_read_that_failed_leaves_its_connection_usable(pg: Database) -> None:
    with pytest.raises(Exception, match="division by zero"):
        async with pg.reader() as conn:
            first = await _backend_pid(conn)
            await conn.execute(text("SELECT 1 / (n - n) FROM counter"))
    async with pg.reader() as conn:
        assert await _backend_pid(conn) == first
        assert (await conn.execute(text("SELECT n FROM counter"))).scalar_one() == 0


async def _burst(db: Database, transactions: int, hold_until: int) -> set[int]:
    """``transactions`` write transactions started at once, each holding its connection until
    ``hold_until`` connections are out of the pool; the backends they ran on."""
    pids: list[int] = []
    gate = asyncio.Event()

    async def one() -> None:
        async with db.transaction() as conn:
            pids.append(await _backend_pid(conn))
            await gate.wait()

    tasks = [asyncio.create_task(one()) for _ in range(transactions)]
    try:
        await eventually(lambda: len(pids) >= hold_until, message=f"{hold_until} transactions hold a connection",
                         timeout=10)
    finally:
        gate.set()
        await asyncio.wait_for(asyncio.gather(*tasks), timeout=30)
    return set(pids)


async def test_a_burst_opens_no_more_than_the_pool_and_the_next_burst_takes_the_same(four: Database) -> None:
    # Given a database of four connections, and eight transactions at once
    first = await _burst(four, 8, hold_until=4)
    # Then four backends ran them (the others waited for a connection), and a second burst
    # runs on those four: none was closed for coming back (an overflow pool closed the ones
    # beyond its size and opened new ones for the next burst)
    assert len(first) == 4
    second = await _burst(four, 8, hold_until=4)
    assert second == first


async def test_a_writer_takes_a_connection_reads_keep_idle_rather_than_wait_for_the_pool(four: Database) -> None:
    # Given two reads at once, whose connections stay kept for reads once they end
    gate = asyncio.Event()

    async def read() -> None:
        async with four.reader() as conn:
            await _backend_pid(conn)
            await gate.wait()

    reads = [asyncio.create_task(read()) for _ in range(2)]
    await eventually(lambda: four.engine.pool.checkedout() >= 2,  # type: ignore[attr-defined]
                     message="two reads hold a connection")
    gate.set()
    await asyncio.wait_for(asyncio.gather(*reads), timeout=10)
    kept = four._pg_kept
    assert kept is not None and len(kept._reading) == 2
    # When four write transactions run at once: the pool has two connections left
    # Then all four run together (two on the reads' idle connections), not two of them
    # waiting for the pool's timeout
    assert len(await _burst(four, 4, hold_until=4)) == 4
