"""SQLite write transactions run inline once they hold the write lock (sqlite_driver).

What must hold: a writer in another connection (another process in production) makes ours
wait, not fail and not block the event loop; a failing block rolls back; the connection goes
back to one hop per statement afterwards.
"""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path

import pytest
from sqlalchemy import Connection, text

from ira.runtime.store import sqlite_driver
from ira.runtime.store.database import Database
from ira.runtime.store.migrate import upgrade
from tests.eventually import eventually


@pytest.fixture
async def sqlite_db(tmp_path: Path):  # type: ignore[no-untyped-def]
    db = Database.create(f"sqlite:///{tmp_path / 'ira.db'}")
    await upgrade(db)
    async with db.transaction() as conn:
        await conn.execute(text("CREATE TABLE counter (n INTEGER NOT NULL)"))
        await conn.execute(text("INSERT INTO counter VALUES (0)"))
    yield db, tmp_path / "ira.db"
    await db.close()


async def _count(db: Database) -> int:
    async with db.reader() as conn:
        return int((await conn.execute(text("SELECT n FROM counter"))).scalar_one())


async def test_a_writer_in_another_connection_makes_ours_wait_without_blocking_the_loop(sqlite_db) -> None:  # type: ignore[no-untyped-def]
    db, path = sqlite_db
    other = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    other.execute("BEGIN IMMEDIATE")
    other.execute("UPDATE counter SET n = n + 10")

    async def increment() -> None:
        async with db.transaction() as conn:
            await conn.execute(text("UPDATE counter SET n = n + 1"))

    writing = asyncio.create_task(increment())
    ticks = 0
    for _ in range(20):  # the loop keeps running while our writer waits for the lock
        await asyncio.sleep(0.01)
        ticks += 1
    assert ticks == 20 and not writing.done()
    other.execute("COMMIT")
    other.close()
    await asyncio.wait_for(writing, timeout=10)
    assert await _count(db) == 11


async def test_a_failing_write_rolls_back_and_the_next_one_commits(sqlite_db) -> None:  # type: ignore[no-untyped-def]
    db, _ = sqlite_db
    with pytest.raises(RuntimeError):
        async with db.transaction() as conn:
            await conn.execute(text("UPDATE counter SET n = n + 1"))
            raise RuntimeError("refused")
    assert await _count(db) == 0
    async with db.transaction() as conn:
        await conn.execute(text("UPDATE counter SET n = n + 5"))
    assert await _count(db) == 5


async def test_concurrent_writers_are_serialized(sqlite_db) -> None:  # type: ignore[no-untyped-def]
    db, _ = sqlite_db

    async def increment() -> None:
        async with db.transaction() as conn:
            n = (await conn.execute(text("SELECT n FROM counter"))).scalar_one()
            await asyncio.sleep(0)  # let the others try to interleave
            await conn.execute(text("UPDATE counter SET n = :n"), {"n": n + 1})

    await asyncio.gather(*(increment() for _ in range(50)))
    assert await _count(db) == 50


async def test_a_connection_goes_back_to_the_pool_without_a_trip_to_aiosqlite_after_its_commit(
    sqlite_db, monkeypatch: pytest.MonkeyPatch,  # type: ignore[no-untyped-def]
) -> None:
    """The pool's reset on return rolls back only what is still open: a committed write (or a
    read whose transaction SQLAlchemy already ended) costs no rollback on aiosqlite's thread."""
    db, _ = sqlite_db
    rollbacks: list[bool] = []
    original = sqlite_driver.OneHopConnection.rollback

    def counted(self: sqlite_driver.OneHopConnection) -> None:
        rollbacks.append(self.inline)
        original(self)

    monkeypatch.setattr(sqlite_driver.OneHopConnection, "rollback", counted)
    async with db.transaction() as conn:
        await conn.execute(text("UPDATE counter SET n = n + 1"))
    assert rollbacks == []
    assert await _count(db) == 1
    assert rollbacks == [False]  # the read's own end, no second one from the pool


async def test_a_connection_returned_inside_a_transaction_is_rolled_back(sqlite_db) -> None:  # type: ignore[no-untyped-def]
    """A transaction SQLAlchemy does not know of (opened with raw SQL) is still ended by the
    pool: its write is undone and the write lock is free for the next writer."""
    db, _ = sqlite_db
    def write_behind_sqlalchemys_back(sync: Connection) -> None:
        cursor = sync.connection.cursor()
        cursor.execute("BEGIN IMMEDIATE")
        cursor.execute("UPDATE counter SET n = n + 100")
        cursor.close()

    async with db.engine.connect() as conn:
        await conn.run_sync(write_behind_sqlalchemys_back)
    async with db.transaction() as conn:
        await conn.execute(text("UPDATE counter SET n = n + 1"))
    assert await _count(db) == 1


async def test_no_engine_event_puts_every_statement_through_sqlalchemys_dispatch(sqlite_db) -> None:  # type: ignore[no-untyped-def]
    """BEGIN is the dialect's (do_begin), not an engine ``begin`` listener: with any engine
    event, every statement of every connection pays SQLAlchemy's event dispatch."""
    db, _ = sqlite_db
    assert not db.engine.sync_engine._has_events


def _dbapi(conn) -> object:  # type: ignore[no-untyped-def]
    return conn.sync_connection.connection.dbapi_connection


async def test_write_transactions_take_turns_on_one_kept_connection(sqlite_db) -> None:  # type: ignore[no-untyped-def]
    """No checkout and return around each write (sqlite_writer); after one that did not commit
    the next takes a fresh connection from the pool, and closing the database returns it."""
    db, _ = sqlite_db
    async with db.transaction() as conn:
        first = _dbapi(conn)
    async with db.transaction() as conn:
        assert _dbapi(conn) is first
        await conn.execute(text("UPDATE counter SET n = n + 1"))
    with pytest.raises(RuntimeError):
        async with db.transaction() as conn:
            await conn.execute(text("UPDATE counter SET n = n + 10"))
            raise RuntimeError("refused")
    async with db.transaction() as conn:
        await conn.execute(text("UPDATE counter SET n = n + 2"))
    assert await _count(db) == 3
    assert db.engine.pool.checkedout() == 1  # type: ignore[attr-defined]
    await db.close()
    assert db.engine.pool.checkedout() == 0  # type: ignore[attr-defined]


async def test_a_write_cancelled_inside_its_block_is_undone_and_the_next_one_commits(sqlite_db) -> None:  # type: ignore[no-untyped-def]
    db, _ = sqlite_db
    inside = asyncio.Event()

    async def cancelled_midway() -> None:
        async with db.transaction() as conn:
            await conn.execute(text("UPDATE counter SET n = n + 10"))
            inside.set()
            await asyncio.Event().wait()  # until cancelled

    task = asyncio.create_task(cancelled_midway())
    await asyncio.wait_for(inside.wait(), timeout=10)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    async with db.transaction() as conn:
        await conn.execute(text("UPDATE counter SET n = n + 1"))
    assert await _count(db) == 1


async def test_a_writer_cancelled_while_waiting_for_the_lock_leaves_the_next_one_free_to_commit(sqlite_db) -> None:  # type: ignore[no-untyped-def]
    """Its BEGIN still runs on aiosqlite's thread once the other process lets go: it must not
    leave the connection holding the write lock for the next writer to trip over."""
    db, path = sqlite_db
    async with db.transaction() as conn:
        await conn.execute(text("UPDATE counter SET n = n + 1"))
    other = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    other.execute("BEGIN IMMEDIATE")

    async def increment() -> None:
        async with db.transaction() as conn:
            await conn.execute(text("UPDATE counter SET n = n + 10"))

    waiting = asyncio.create_task(increment())
    # it holds the process's write lock once it waits for SQLite's: taking the first does not
    # suspend it, and its first suspension is the wait for the second
    await eventually(db._write_lock.locked, message="the writer waits for the other process's lock")
    assert not waiting.done()
    waiting.cancel()
    await asyncio.sleep(0)  # one turn of the loop: the cancellation reaches it while the BEGIN still waits
    assert not waiting.done()
    other.execute("COMMIT")
    other.close()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(waiting, timeout=15)
    async with db.transaction() as conn:
        await conn.execute(text("UPDATE counter SET n = n + 100"))
    assert await _count(db) == 101


async def test_a_snapshot_reads_inline_and_leaves_no_read_transaction_behind(sqlite_db) -> None:  # type: ignore[no-untyped-def]
    db, _ = sqlite_db
    seen = []
    for _ in range(2):  # the second snapshot may get the first's pooled connection: it must see the write
        async with db.snapshot() as conn:
            adapted = (await conn.get_raw_connection()).dbapi_connection
            seen.append((int((await conn.execute(text("SELECT n FROM counter"))).scalar_one()), adapted.inline))
        assert not adapted.inline and not sqlite_driver.is_in_transaction(adapted)  # back to one hop, read ended
        async with db.transaction() as write:
            await write.execute(text("UPDATE counter SET n = n + 1"))

    assert seen == [(0, True), (1, True)]
