"""PostgreSQL: write transactions and reads on connections kept out of the pool between them.

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
it. Reads (``Database.reader``: statements in autocommit, no BEGIN, see
``pg_fast.reading_without_transaction``) keep connections of their own the same way: an idle
relay, the scanner and the dashboard's API each open one per poll or request, ~95 µs of CPU
through ``AsyncEngine.connect`` before the first statement.

Any other connection (a commit or rollback that raised or was cancelled, a connection the
server closed, one ``pg_fast`` abandoned) is invalidated and handed back to the pool, which
opens a new one: what ``AsyncEngine.begin`` would have done. A kept connection the server
closed while it was idle is found as the pool's checkout hook finds one (asyncpg read the close
from the socket) and is not used.
"""

from __future__ import annotations

import asyncio
import logging
from contextlib import AbstractContextManager
from types import TracebackType

from sqlalchemy.engine import RootTransaction
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine
from sqlalchemy.pool import QueuePool

from ira.runtime.store.pg_fast import FastConnection, reading_without_transaction

log = logging.getLogger(__name__)


class KeptConnections:
    """One ``Database``'s kept PostgreSQL connections: for write transactions, and apart for reads;
    of each kind at most half the engine's pool (a fixed pool: ``Database.create``)."""

    def __init__(self, engine: AsyncEngine) -> None:
        self._engine = engine
        pool = engine.pool
        self._keep = max(1, pool.size() // 2) if isinstance(pool, QueuePool) else 1
        self._idle: list[AsyncConnection] = []
        """Kept for write transactions."""
        self._reading: list[AsyncConnection] = []
        """Kept for reads (autocommit while one runs)."""

    def transaction(self) -> _Transaction:
        """A write transaction on a kept (or new) connection: committed when the block ends."""
        return _Transaction(self)

    def read(self) -> _Read:
        """A connection whose statements run without a transaction around them, kept for reads."""
        return _Read(self)

    @property
    def idle(self) -> int:
        """Connections kept between write transactions right now."""
        return len(self._idle)

    async def _take(self, idle: list[AsyncConnection], other: list[AsyncConnection]) -> AsyncConnection:
        """A kept connection of this kind, else one the other kind keeps idle, else the pool's.

        The other kind's idle ones are connections like any other, and they count against the
        pool's limit: at that limit, a writer that left them idle would wait for the pool (up to
        its timeout) while reads kept ``keep`` connections doing nothing."""
        for kept in (idle, other):
            while kept:
                conn = kept.pop()  # the most recently used: its backend is the warmest
                if _usable(conn):
                    return conn
                await _discard(conn)
        conn = FastConnection(self._engine)
        await conn.start()
        return conn

    def _keep_or_not(self, conn: AsyncConnection, idle: list[AsyncConnection]) -> bool:
        if len(idle) < self._keep and _usable(conn):
            idle.append(conn)
            return True
        return False

    async def close(self) -> None:
        """Hand every kept connection back to the pool."""
        idle, self._idle, reading, self._reading = self._idle, [], self._reading, []
        for conn in [*idle, *reading]:
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


class _Use:
    """One use of a kept (or new) connection; ``_Transaction`` and ``_Read`` say how it starts
    and ends. Kept again only if it ended cleanly, else invalidated and given back to the pool."""

    __slots__ = ("_kept", "_conn")
    _conn: AsyncConnection

    def __init__(self, kept: KeptConnections) -> None:
        self._kept = kept

    def _idle(self) -> list[AsyncConnection]:
        raise NotImplementedError

    def _others(self) -> list[AsyncConnection]:
        """The other kind's idle connections, taken when this kind keeps none."""
        raise NotImplementedError

    def _start(self, conn: AsyncConnection) -> None:
        raise NotImplementedError

    async def _end(self, conn: AsyncConnection, kind: type[BaseException] | None, error: BaseException | None,
                   traceback: TracebackType | None) -> bool:
        """End the use; True if it ended cleanly (the connection may be kept)."""
        raise NotImplementedError

    async def __aenter__(self) -> AsyncConnection:
        conn = await self._kept._take(self._idle(), self._others())
        try:
            self._start(conn)
        except BaseException:
            await _discard(conn)
            raise
        self._conn = conn
        return conn

    async def __aexit__(self, kind: type[BaseException] | None, error: BaseException | None,
                        traceback: TracebackType | None) -> None:
        conn, ended = self._conn, False
        try:
            ended = await self._end(conn, kind, error, traceback)
        finally:
            if not ended:
                await _discard(conn)
            elif not self._kept._keep_or_not(conn, self._idle()):
                await _close(conn)


class _Transaction(_Use):
    """``KeptConnections.transaction``: SQLAlchemy's transaction on the kept connection's sync
    connection (no I/O: ``pg_fast`` sends BEGIN with the first statement), ended by COMMIT, or
    by ROLLBACK after an error."""

    __slots__ = ("_transaction",)
    _transaction: RootTransaction

    def _idle(self) -> list[AsyncConnection]:
        return self._kept._idle

    def _others(self) -> list[AsyncConnection]:
        return self._kept._reading

    def _start(self, conn: AsyncConnection) -> None:
        sync = conn.sync_connection
        assert sync is not None  # started in ``_take``
        self._transaction = sync.begin()

    async def _end(self, conn: AsyncConnection, kind: type[BaseException] | None, error: BaseException | None,
                   traceback: TracebackType | None) -> bool:
        sync = conn.sync_connection
        if sync is not None and not sync.invalidated and self._transaction.is_active:
            await (conn.commit() if kind is None else conn.rollback())
            return True
        if kind is None:  # nothing to commit on: pg_fast abandoned the connection
            await conn.commit()  # raises SQLAlchemy's invalidated-connection error
        return False


class _Read(_Use):
    """``KeptConnections.read``: a kept connection in autocommit while the block runs
    (``pg_fast.reading_without_transaction``); at its end SQLAlchemy's transaction, begun without
    I/O by the first statement, is ended (nothing was begun on the server). A read that failed
    leaves nothing open: its connection is kept too, unless ``pg_fast`` abandoned it (a statement
    cut off or a lost connection)."""

    __slots__ = ("_autocommit",)
    _autocommit: AbstractContextManager[None]

    def _idle(self) -> list[AsyncConnection]:
        return self._kept._reading

    def _others(self) -> list[AsyncConnection]:
        return self._kept._idle

    def _start(self, conn: AsyncConnection) -> None:
        self._autocommit = reading_without_transaction(conn)
        self._autocommit.__enter__()

    async def _end(self, conn: AsyncConnection, kind: type[BaseException] | None, error: BaseException | None,
                   traceback: TracebackType | None) -> bool:
        self._autocommit.__exit__(kind, error, traceback)
        sync = conn.sync_connection
        if sync is None or sync.closed or sync.invalidated:
            return False
        await conn.rollback()  # SQLAlchemy's own: no round trip, nothing began on the server
        return True


async def _close(conn: AsyncConnection) -> None:
    """Back to the pool as it is (a clean connection the writers do not keep, or one invalidated);
    shielded: a cancellation of the caller cannot leave it checked out."""
    closing = asyncio.ensure_future(conn.close())
    try:
        await asyncio.shield(closing)
    except Exception:  # a cancellation (BaseException) goes through; the close still runs
        log.warning("closing a PostgreSQL connection failed", exc_info=True)
