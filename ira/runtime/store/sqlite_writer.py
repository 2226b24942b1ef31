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

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from ira.runtime.store import sqlite_driver
from ira.runtime.store.sqlite_fast import FastConnection

log = logging.getLogger(__name__)


class SQLiteWriter:
    """The write connection of one ``Database`` on SQLite; used under its write lock only."""

    def __init__(self, engine: AsyncEngine) -> None:
        self._engine = engine
        self._conn: AsyncConnection | None = None
        self._adapted: sqlite_driver.OneHopConnection | None = None

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[AsyncConnection]:
        """A write transaction on the kept connection: committed when the block ends."""
        conn, adapted = await self._connection()
        committed = False
        try:
            await sqlite_driver.begin_writing(adapted)
            try:
                async with conn.begin():
                    yield conn
            finally:
                sqlite_driver.end_writing(adapted)
            committed = True
        finally:
            if not committed:
                await self.close()

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
