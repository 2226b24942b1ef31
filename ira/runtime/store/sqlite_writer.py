"""One connection kept for a process's SQLite write transactions.

The writes of a process take turns anyway (``Database``'s write lock, then SQLite's), so a
connection checked out of the pool and returned around each one only cost: opening the
``AsyncConnection`` (a greenlet for the pool's checkout), fetching its DBAPI connection (another),
and closing it, which SQLAlchemy runs in a task of its own behind ``asyncio.shield`` — two
more turns of the event loop, all of them while holding the write lock that every other writer
waits for. ~105 µs of CPU a transaction of the ~150 an empty one cost; a run to its approval
wait is ~10 write transactions.

After any transaction that did not commit (an error, a refused compare-and-set, a cancellation)
the connection goes back to the pool and the next transaction takes a new one: the pool's
reset rolls back whatever is left open, in order behind anything still queued on the
connection's thread (a ``BEGIN IMMEDIATE`` that was waiting for another process's lock when
its task was cancelled), which reusing it here could not promise.
"""

from __future__ import annotations

import asyncio
import logging
from types import TracebackType

from sqlalchemy.engine import RootTransaction
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from ira.runtime.store import sqlite_driver
from ira.runtime.store.sqlite_fast import FastConnection

log = logging.getLogger(__name__)


class SQLiteWriter:
    """The write connection of one ``Database`` on SQLite; used under ``lock``, the
    ``Database``'s write lock, which its transactions take first and let go of last."""

    def __init__(self, engine: AsyncEngine, lock: asyncio.Lock) -> None:
        self._engine = engine
        self._lock = lock
        self._conn: AsyncConnection | None = None
        self._adapted: sqlite_driver.OneHopConnection | None = None

    def transaction(self) -> _WriteTransaction:
        """A write transaction on the kept connection: committed when the block ends."""
        return _WriteTransaction(self)

    async def _connection(self) -> tuple[AsyncConnection, sqlite_driver.OneHopConnection]:
        if self._conn is not None and self._adapted is not None:
            if not (self._conn.closed or self._conn.invalidated):
                return self._conn, self._adapted
            await self.close()
        conn = FastConnection(self._engine)
        await conn.start()
        try:
            adapted = (await conn.get_raw_connection()).dbapi_connection
        except BaseException:
            await conn.close()
            raise
        assert isinstance(adapted, sqlite_driver.OneHopConnection)
        self._conn, self._adapted = conn, adapted
        return conn, adapted

    async def close(self) -> None:
        """Give the connection back to the pool (its reset rolls back anything left open)."""
        conn, self._conn, self._adapted = self._conn, None, None
        if conn is None:
            return
        try:
            await conn.close()
        except Exception:  # the next transaction opens another; the pool drops a broken one
            log.warning("closing SQLite's write connection failed", exc_info=True)


class _WriteTransaction:
    """``SQLiteWriter.transaction``: the write lock, SQLite's lock (``begin_writing``) and
    SQLAlchemy's transaction on the sync connection, ended in the reverse order.

    SQLAlchemy's transaction is begun and ended on the sync connection itself:
    ``AsyncConnection.begin`` runs the same begin and exit each in a greenlet of its own, which
    inline, where nothing awaits, is all they add (~20 % of an empty write transaction's
    instructions). A class rather than two nested ``asynccontextmanager`` generators (the lock's
    and this): each such layer is a generator, a coroutine per enter and exit, and its frames."""

    __slots__ = ("_writer", "_adapted", "_transaction")
    _adapted: sqlite_driver.OneHopConnection
    _transaction: RootTransaction

    def __init__(self, writer: SQLiteWriter) -> None:
        self._writer = writer

    async def __aenter__(self) -> AsyncConnection:
        writer = self._writer
        await writer._lock.acquire()
        try:
            conn, adapted = await writer._connection()
            try:
                await sqlite_driver.begin_writing(adapted)
                try:
                    sync = conn.sync_connection
                    assert sync is not None  # started in ``_connection``
                    self._transaction = sync.begin()
                except BaseException:
                    sqlite_driver.end_writing(adapted)
                    raise
            except BaseException:
                await writer.close()
                raise
        except BaseException:
            writer._lock.release()
            raise
        self._adapted = adapted
        return conn

    async def __aexit__(self, kind: type[BaseException] | None, error: BaseException | None,
                        traceback: TracebackType | None) -> None:
        try:
            committed = False
            try:
                try:
                    self._transaction.__exit__(kind, error, traceback)  # commits, or rolls back
                finally:
                    sqlite_driver.end_writing(self._adapted)
                committed = kind is None
            finally:
                if not committed:
                    await self._writer.close()
        finally:
            self._writer._lock.release()
