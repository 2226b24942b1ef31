"""PostgreSQL: statements on asyncpg's prepared statements (``store/pg_fast.py``) behave as
SQLAlchemy's path does, and a task cancelled in the middle of one leaves nothing behind on its
pooled connection."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator

import asyncpg
import pytest
from sqlalchemy import Column, Integer, MetaData, String, Table, bindparam, func, insert, select, text, update

from ira.runtime.store.database import Database
from ira.runtime.store.plans import FastResult
from tests.store_fixtures import _create_schema, _drop_schema, postgres_test_url

pytestmark = pytest.mark.postgres

_probe = Table("probe", MetaData(), Column("id", Integer, primary_key=True), Column("state", String))
_INSERT = insert(_probe)
_MOVE = update(_probe).where(_probe.c.state.in_(bindparam("sources", expanding=True))) \
    .values(state=bindparam("new_state")).returning(_probe.c.id, _probe.c.state)
_SLEEP = select(func.pg_sleep(bindparam("seconds")).label("slept"))


_SCHEMAS: dict[Database, str] = {}


@pytest.fixture
async def small_db() -> AsyncIterator[Database]:
    """A database of two connections at most, one kept between transactions: a connection a
    cancelled task gave back is the one the next transaction gets."""
    schema = f"t_{uuid.uuid4().hex[:12]}"
    url = postgres_test_url()
    await _create_schema(url, schema)
    db = Database.create(url, schema=schema, pool_size=2)
    _SCHEMAS[db] = schema
    try:
        async with db.transaction() as conn:
            await conn.execute(text("CREATE TABLE probe (id int PRIMARY KEY, state text)"))
        yield db
    finally:
        await db.close()
        await _drop_schema(url, schema)
        _SCHEMAS.pop(db, None)


async def _visible(db: Database) -> int:
    """Rows another connection sees committed."""
    other = await asyncpg.connect(postgres_test_url(), server_settings={"search_path": _SCHEMAS[db]})
    try:
        return int(await other.fetchval("SELECT count(*) FROM probe"))
    finally:
        await other.close()


async def test_prebuilt_statements_run_on_the_fast_path_with_sqlalchemys_results(small_db: Database) -> None:
    # Given a prebuilt UPDATE with an IN list, executed once (a statement seen once keeps SQLAlchemy's path)
    async with small_db.transaction() as conn:
        for i, state in enumerate(("new", "open", "done")):
            await conn.execute(_INSERT, {"id": i, "state": state})
        first = await conn.execute(_MOVE, {"sources": ["new"], "new_state": "open"})
        assert not isinstance(first, FastResult) and first.rowcount == 1

    # When it runs again, with IN lists of other lengths
    async with small_db.transaction() as conn:
        two = await conn.execute(_MOVE, {"sources": ["open", "nothing"], "new_state": "closed"})
        rows = sorted(two.all())
        none = await conn.execute(_MOVE, {"sources": [], "new_state": "x"})

    # Then it ran on the fast path and answered as SQLAlchemy's result does
    assert isinstance(two, FastResult) and two.rowcount == 2
    assert [(r.id, r._mapping["state"]) for r in rows] == [(0, "closed"), (1, "closed")]
    assert none.rowcount == 0 and none.first() is None
    assert await _visible(small_db) == 3


async def test_a_fast_statement_refused_by_the_database_raises_sqlalchemys_error(small_db: Database) -> None:
    from sqlalchemy.exc import IntegrityError

    for _attempt in range(2):  # the second time on the fast path
        with pytest.raises(IntegrityError):
            async with small_db.transaction() as conn:
                await conn.execute(_INSERT, {"id": 7, "state": "a"})
                await conn.execute(_INSERT, {"id": 7, "state": "b"})
    assert await _visible(small_db) == 0


@pytest.mark.parametrize("turns", range(8))
async def test_a_transaction_cancelled_in_flight_leaves_nothing_open_on_its_connection(
        small_db: Database, turns: int) -> None:
    # Given a prebuilt statement already on the fast path
    for _ in range(2):
        async with small_db.transaction() as conn:
            await conn.execute(_SLEEP, {"seconds": 0})

    async def work() -> None:
        async with small_db.transaction() as conn:
            await conn.execute(_SLEEP, {"seconds": 0.05})

    # When a task running it is cancelled after ``turns`` turns of the loop (BEGIN in flight,
    # the statement in flight, or done)
    task = asyncio.create_task(work())
    for _ in range(turns):
        await asyncio.sleep(0)
    task.cancel()
    with pytest.raises(BaseException):  # noqa: B017, PT011  # cancelled, or SQLAlchemy's error for it
        await task

    # Then the next transactions on the pool commit for everyone to see (session 5's native
    # statements left asyncpg believing a failed transaction was open: the next ones were
    # savepoints inside a transaction that never committed)
    for i in range(2):
        async with small_db.transaction() as conn:
            await conn.execute(_INSERT, {"id": i, "state": "after"})
    assert await _visible(small_db) == 2


async def test_a_reader_runs_without_a_transaction_and_leaves_its_connection_transactional(
        small_db: Database) -> None:
    # When a reader runs two statements
    async with small_db.reader() as conn:
        first, second = [(await conn.execute(text("SELECT pg_current_xact_id()::text"))).scalar_one()
                         for _ in range(2)]
    # Then each ran in its own (implicit) transaction: no BEGIN held them together
    assert first != second

    # And a write transaction on the same pooled connection after it is still all or nothing
    with pytest.raises(RuntimeError):
        async with small_db.transaction() as conn:
            await conn.execute(_INSERT, {"id": 1, "state": "half"})
            raise RuntimeError("abandoned")
    async with small_db.transaction() as conn:
        assert (await conn.execute(text("SELECT pg_current_xact_id()::text"))).scalar_one() \
            == (await conn.execute(text("SELECT pg_current_xact_id()::text"))).scalar_one()
    assert await _visible(small_db) == 0


async def test_a_connection_whose_first_statement_is_fast_commits_when_told(small_db: Database) -> None:
    # Given a plain engine connection (no Database.transaction), a prebuilt statement seen before
    async with small_db.transaction() as conn:
        await conn.execute(_INSERT, {"id": 1, "state": "seen"})
    # When its first statement takes the fast path and it commits
    async with small_db.engine.connect() as conn:
        result = await conn.execute(_INSERT, {"id": 2, "state": "fast"})
        await conn.commit()
    # Then the commit committed it, as SQLAlchemy's autobegin would have
    assert isinstance(result, FastResult)
    assert await _visible(small_db) == 2


@pytest.mark.parametrize("fast", [False, True])
@pytest.mark.parametrize("turns", [*range(8), None])
async def test_a_reader_cancelled_anywhere_leaves_no_autocommit_behind(
        small_db: Database, turns: int | None, fast: bool) -> None:
    # Given a prebuilt read statement (on the fast path once seen) and SQLAlchemy's path (text)
    statement = _SLEEP if fast else text("SELECT pg_sleep(:seconds)")
    for _ in range(2):
        async with small_db.reader() as conn:
            await conn.execute(statement, {"seconds": 0})

    between = asyncio.Event()

    async def read() -> None:
        async with small_db.reader() as conn:
            await conn.execute(statement, {"seconds": 0})
            await conn.execute(statement, {"seconds": 0.01})
            between.set()
            await asyncio.Event().wait()  # the reader's owner awaits something else, until cancelled

    # When a reader is cancelled after ``turns`` turns of the loop (checkout, a statement in
    # flight, or between its statements: the connection is not invalidated then)
    task = asyncio.create_task(read())
    if turns is None:
        await asyncio.wait_for(between.wait(), timeout=10)
    for _ in range(turns or 0):
        await asyncio.sleep(0)
    task.cancel()
    with pytest.raises(BaseException):  # noqa: B017, PT011
        await task

    # Then the next write transactions on the pool are all or nothing: a connection handed back
    # in autocommit would have committed each "half" row on its own (seen with the restore of
    # ``reading_without_transaction`` moved out of its ``finally``: cancelled between statements)
    for i in range(2):
        with pytest.raises(RuntimeError):
            async with small_db.transaction() as conn:
                await conn.execute(_INSERT, {"id": i, "state": "half"})
                raise RuntimeError("abandoned")
        async with small_db.transaction() as conn:
            await conn.execute(_INSERT, {"id": 10 + i, "state": "whole"})
    assert await _visible(small_db) == 2


async def test_a_statement_cancelled_while_it_waits_for_a_lock_stops_on_the_server(small_db: Database) -> None:
    # Given a prebuilt UPDATE already on the fast path, and another session holding its row's lock
    async with small_db.transaction() as conn:
        await conn.execute(_INSERT, {"id": 1, "state": "new"})
    for _ in range(2):
        async with small_db.transaction() as conn:
            await conn.execute(_MOVE, {"sources": ["new"], "new_state": "new"})
    holder = await asyncpg.connect(postgres_test_url(), server_settings={"search_path": _SCHEMAS[small_db]})
    try:
        locked = holder.transaction()
        await locked.start()
        await holder.execute("SELECT * FROM probe WHERE id = 1 FOR UPDATE")

        async def move() -> None:
            async with small_db.transaction() as conn:
                await conn.execute(_MOVE, {"sources": ["new"], "new_state": "moved"})

        # When a task whose UPDATE waits for that lock is cancelled
        task = asyncio.create_task(move())
        # lock waits of the sessions using this test's table only: other suites may share the server
        waiting = ("SELECT count(*) FROM pg_locks WHERE NOT granted AND pid <> pg_backend_pid() AND pid IN "
                   "(SELECT pid FROM pg_locks WHERE relation = 'probe'::regclass)")
        deadline = asyncio.get_running_loop().time() + 10
        while await holder.fetchval(waiting) == 0:
            assert asyncio.get_running_loop().time() < deadline, "the UPDATE never waited"
            await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(BaseException):  # noqa: B017, PT011
            await task

        # Then its statement no longer waits on the server (as SQLAlchemy's path, which cancels
        # it before closing): a terminated socket alone left it queued for the lock until the
        # holder ended, then run and rolled back, a dead client's statement holding its place
        assert await holder.fetchval(waiting) == 0
    finally:
        await holder.close()
