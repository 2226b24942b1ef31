"""PostgreSQL write transactions on connections kept out of the pool between them.

``AsyncEngine.begin`` opens an ``AsyncConnection`` per transaction: a pool checkout in a
greenlet, SQLAlchemy's transaction begun and ended in greenlets of their own, and a close that
SQLAlchemy runs in a task behind ``asyncio.shield`` (so a cancelled caller still returns the
connection), each a turn of the event loop. Measured here, a transaction of one statement
(BEGIN, the statement, COMMIT: three round trips) cost ~510 µs of CPU that way against ~180 µs
for the same on asyncpg alone, and ~300 µs on a connection kept open with SQLAlchemy's
transaction begun on the sync connection itself, as ``sqlite_writer`` does for SQLite. A
durable step is one such transaction, a run to its approval wait about eight.

So up to ``keep`` connections stay checked out between transactions, each taken by one
transaction at a time: BEGIN still goes with the first statement (``pg_fast``), COMMIT or
ROLLBACK ends it, and a connection goes back to the idle ones only if nothing went wrong with
it. Anything else (a commit or rollback that raised or was cancelled, a connection the server
closed, one ``pg_fast`` abandoned) is invalidated and handed back to the pool, which opens a
new one: what ``AsyncEngine.begin`` would have done. A kept connection the server closed while
it was idle is found as the pool's checkout hook finds one (asyncpg read the close from the
socket) and is not used.
"""

from __future__ import annotations

import asyncio
import logging
from types import TracebackType

from sqlalchemy.engine import RootTransaction
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from ira.runtime.store.pg_fast import FastConnection

log = logging.getLogger(__name__)


class PgWriters:
    """The write transactions of one ``Database`` on PostgreSQL and their kept connections."""

    def __init__(self, engine: AsyncEngine, *, keep: int) -> None:
        self._engine = engine
        self._keep = keep
        self._idle: list[AsyncConnection] = []

    def transaction(self) -> _PgTransaction:
        """A write transaction on a kept (or new) connection: committed when the block ends."""
        return _PgTransaction(self)

    @property
    def idle(self) -> int:
        """Connections kept between transactions right now."""
        return len(self._idle)

    async def _take(self) -> AsyncConnection:
        while self._idle:
            conn = self._idle.pop()  # the most recently used: its backend is the warmest
            if _usable(conn):
                return conn
            await _discard(conn)
        conn = FastConnection(self._engine)
        await conn.start()
        return conn

    def _keep_or_not(self, conn: AsyncConnection) -> bool:
        if len(self._idle) < self._keep and _usable(conn):
            self._idle.append(conn)
            return True
        return False

    async def close(self) -> None:
        """Hand every kept connection back to the pool."""
        idle, self._idle = self._idle, []
        for conn in idle:
            try:
                await conn.close()
            except Exception:  # the pool drops a broken one
                log.warning("closing a kept PostgreSQL connection failed", exc_info=True)


def _usable(conn: AsyncConnection) -> bool:
    """Open, valid, outside any transaction, and not closed by the server (as far as asyncpg
    read from the socket while the connection was idle)."""
    sync = conn.sync_connection
    if sync is None or sync.closed or sync.invalidated or sync.in_transaction():
        return False
    fairy = sync._dbapi_connection
    if fairy is None:
        return False
    adapted = fairy.dbapi_connection
    if adapted is None or getattr(adapted, "_transaction", None) is not None:
        return False
    return not adapted._connection.is_closed()


async def _discard(conn: AsyncConnection) -> None:
    """Invalidate ``conn`` (the server ends whatever it had open) and give it back to the pool,
    which replaces it; shielded, so a cancellation cannot leave it checked out."""
    sync = conn.sync_connection
    try:
        if sync is not None and not sync.closed and not sync.invalidated:
            sync.invalidate()
    except Exception:  # closing a broken connection: nothing more to end
        log.debug("invalidating a PostgreSQL connection failed", exc_info=True)
    await _close(conn)


class _PgTransaction:
    """``PgWriters.transaction``: SQLAlchemy's transaction on the kept connection's sync
    connection (no I/O: ``pg_fast`` sends BEGIN with the first statement), ended by COMMIT, or
    by ROLLBACK after an error; the connection is kept again only if that ended cleanly."""

    __slots__ = ("_writers", "_conn", "_transaction")
    _conn: AsyncConnection
    _transaction: RootTransaction

    def __init__(self, writers: PgWriters) -> None:
        self._writers = writers

    async def __aenter__(self) -> AsyncConnection:
        conn = await self._writers._take()
        try:
            sync = conn.sync_connection
            assert sync is not None  # started in ``_take``
            self._transaction = sync.begin()
        except BaseException:
            await _discard(conn)
            raise
        self._conn = conn
        return conn

    async def __aexit__(self, kind: type[BaseException] | None, error: BaseException | None,
                        traceback: TracebackType | None) -> None:
        conn, ended = self._conn, False
        try:
            sync = conn.sync_connection
            if sync is not None and not sync.invalidated and self._transaction.is_active:
                if kind is None:
                    await conn.commit()
                else:
                    await conn.rollback()
                ended = True
            elif kind is None:  # nothing to commit on: pg_fast abandoned the connection
                await conn.commit()  # raises SQLAlchemy's invalidated-connection error
        finally:
            if not ended:
                await _discard(conn)
            elif not self._writers._keep_or_not(conn):
                await _close(conn)


async def _close(conn: AsyncConnection) -> None:
    """Back to the pool as it is (a clean connection the writers do not keep, or one invalidated);
    shielded: a cancellation of the caller cannot leave it checked out."""
    closing = asyncio.ensure_future(conn.close())
    try:
        await asyncio.shield(closing)
    except asyncio.CancelledError:
        raise
    except Exception:
        log.warning("closing a PostgreSQL connection failed", exc_info=True)
