"""SQLite through aiosqlite in ONE thread hop per statement (SQLAlchemy's adapter takes four).

SQLAlchemy's aiosqlite cursor makes a separate trip to aiosqlite's thread to open a
cursor, execute, fetch and close: measured here, ~640 µs per statement against ~140 µs for
aiosqlite alone. Every store transaction is several statements, so that overhead was most
of SQLite's cost. This cursor runs the four steps as one function on aiosqlite's thread.
Everything else (connections, transactions, errors, pooling) is SQLAlchemy's own dialect.
Registered as ``sqlite+ira_aiosqlite``; :func:`~ira.runtime.store.database.normalize_url`
picks it for every SQLite URL.
"""

from __future__ import annotations

import asyncio
import collections
import sqlite3
from typing import Any

from sqlalchemy.dialects import registry
from sqlalchemy.dialects.sqlite.aiosqlite import (
    AsyncAdapt_aiosqlite_connection,
    AsyncAdapt_aiosqlite_cursor,
    AsyncAdapt_aiosqlite_dbapi,
    SQLiteDialect_aiosqlite,
)
from sqlalchemy.util import EMPTY_DICT

DRIVER = "ira_aiosqlite"
BUSY_TIMEOUT_MS = 10_000
"""How long a statement waits for another process's lock before "database is locked"."""


def run_statement(conn: sqlite3.Connection, operation: str, parameters: Any, many: bool) -> tuple[Any, ...]:
    """On aiosqlite's thread: execute, fetch, close; hand back what the cursor knew."""
    cursor = conn.cursor()
    try:
        if many:
            cursor.executemany(operation, parameters)
        elif parameters is None:
            cursor.execute(operation)
        else:
            cursor.execute(operation, parameters)
        rows = cursor.fetchall() if cursor.description else []
        return cursor.description, rows, cursor.rowcount, cursor.lastrowid
    finally:
        cursor.close()


class OneHopCursor(AsyncAdapt_aiosqlite_cursor):
    """A DBAPI cursor facade whose state is the result of the last one-hop statement."""

    __slots__ = ("_description", "_rowcount", "_lastrowid")

    def __init__(self, adapt_connection: AsyncAdapt_aiosqlite_connection) -> None:
        self._adapt_connection = adapt_connection
        self._connection = adapt_connection._connection
        self._cursor = None  # type: ignore[assignment]  # no aiosqlite cursor is ever opened
        self._soft_closed_memoized = EMPTY_DICT
        self._rows = collections.deque()
        self._description: Any = None
        self._rowcount = -1
        self._lastrowid: int | None = None

    @property
    def description(self) -> Any:
        return self._description

    @property
    def rowcount(self) -> int:
        return self._rowcount

    @property
    def lastrowid(self) -> int:
        return self._lastrowid  # type: ignore[return-value]

    async def _run(self, operation: Any, parameters: Any, many: bool) -> None:
        if self._adapt_connection.inline:  # type: ignore[attr-defined]  # always a OneHopConnection
            description, rows, self._rowcount, self._lastrowid = run_statement(
                self._connection._conn, operation, parameters, many)
            self._description = description
            self._rows = collections.deque(rows)
            return
        async with self._adapt_connection._execute_mutex:
            description, rows, self._rowcount, self._lastrowid = await self._connection._execute(
                run_statement, self._connection._conn, operation, parameters, many)
            self._description = description
            self._rows = collections.deque(rows)

    async def _execute_async(self, operation: Any, parameters: Any) -> Any:
        await self._run(operation, parameters, False)

    async def _executemany_async(self, operation: Any, seq_of_parameters: Any) -> Any:
        await self._run(operation, seq_of_parameters, True)

    async def _async_soft_close(self) -> None:
        return None  # nothing is open on the other thread

    def close(self) -> None:
        self._rows.clear()


class OneHopConnection(AsyncAdapt_aiosqlite_connection):
    """aiosqlite's adapter, plus an inline mode for the connection that holds the write lock."""

    __slots__ = ("inline",)
    _cursor_cls = OneHopCursor  # type: ignore[assignment]  # a subclass in spirit: same protocol, one hop

    def __init__(self, dbapi: Any, connection: Any) -> None:
        super().__init__(dbapi, connection)
        self.inline = False
        """True while this connection holds SQLite's write lock: statements run on the caller's thread."""

    def commit(self) -> None:
        if self.inline:
            self._connection._conn.commit()
        else:
            super().commit()

    def rollback(self) -> None:
        if self.inline:
            self._connection._conn.rollback()
        else:
            super().rollback()


class OneHopDbapi(AsyncAdapt_aiosqlite_dbapi):
    def connect(self, *arg: Any, **kw: Any) -> OneHopConnection:
        adapted = super().connect(*arg, **kw)
        return OneHopConnection(self, adapted._connection)


class OneHopSQLiteDialect(SQLiteDialect_aiosqlite):
    driver = DRIVER
    supports_statement_cache = True
    supports_server_side_cursors = False

    @classmethod
    def import_dbapi(cls) -> OneHopDbapi:
        return OneHopDbapi(__import__("aiosqlite"), __import__("sqlite3"))

    def do_begin(self, dbapi_connection: Any) -> None:
        """``BEGIN`` (the connections run in autocommit mode: SQLAlchemy's begin is ours to
        issue), unless :func:`begin_writing` already opened the write transaction with ``BEGIN
        IMMEDIATE``. Here rather than in an engine ``begin`` event: any engine event makes every
        statement of every connection go through SQLAlchemy's event dispatch."""
        adapted = getattr(dbapi_connection, "dbapi_connection", dbapi_connection)
        if not is_in_transaction(adapted):
            cursor = adapted.cursor()
            try:
                cursor.execute("BEGIN")
            finally:
                cursor.close()


def _begin_immediate(conn: sqlite3.Connection, busy_timeout_ms: int) -> None:
    conn.execute(f"PRAGMA busy_timeout={busy_timeout_ms}")
    try:
        conn.execute("BEGIN IMMEDIATE")
    finally:
        conn.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")


async def begin_writing(adapted: OneHopConnection) -> None:
    """Take SQLite's write lock and switch the connection to inline mode until it ends.

    Once a connection holds the write lock (``BEGIN IMMEDIATE`` in WAL mode) none of its
    statements can wait on another connection: readers never block the writer, and no
    commit fsyncs (``synchronous=NORMAL``). So the transaction runs on the event loop's
    thread, without a trip to aiosqlite's thread per statement (~200 µs each on a loaded
    2-core machine, most of a small transaction's time). Only taking the lock can wait (another
    process writing): that is tried without waiting first, and waited for on aiosqlite's
    thread, with the busy timeout, if another writer holds it.
    """
    conn = adapted._connection._conn
    try:
        _begin_immediate(conn, 0)
    except sqlite3.OperationalError as exc:
        if "locked" not in str(exc) and "busy" not in str(exc):
            raise
        await _wait_for_lock(adapted, conn)
    adapted.inline = True


async def _wait_for_lock(adapted: OneHopConnection, conn: sqlite3.Connection) -> None:
    """``BEGIN IMMEDIATE`` on aiosqlite's thread, waiting up to the busy timeout.

    The thread runs it whatever happens to the task that asked: a task cancelled while it waits
    would hand the connection back (to the pool) with a BEGIN still to come, which then holds
    the write lock in a connection nobody uses, and the next writer on it fails ("cannot start
    a transaction within a transaction"). So a cancelled wait still lets the BEGIN end, rolls
    back what it opened, and only then raises the cancellation.
    """
    waiting = asyncio.ensure_future(adapted._connection._execute(_begin_immediate, conn, BUSY_TIMEOUT_MS))
    cancelled: asyncio.CancelledError | None = None
    while not waiting.done():  # bounded by the busy timeout
        try:
            await asyncio.shield(waiting)
        except asyncio.CancelledError as exc:
            cancelled = exc  # raised once the BEGIN ended, even if it ended as this arrived
        except sqlite3.Error:
            break
    if cancelled is None:
        waiting.result()  # the BEGIN's own error, if any
        return
    if not waiting.cancelled() and waiting.exception() is None and conn.in_transaction:
        conn.rollback()
    raise cancelled


def end_writing(adapted: OneHopConnection) -> None:
    """Back to one hop per statement (the transaction is over: committed or rolled back)."""
    adapted.inline = False


def is_in_transaction(dbapi_connection: Any) -> bool:
    """Whether the SQLite connection under SQLAlchemy's adapter has a transaction open."""
    return bool(dbapi_connection._connection._conn.in_transaction)


def register() -> None:
    """Make ``sqlite+ira_aiosqlite://`` resolvable (idempotent)."""
    registry.register(f"sqlite.{DRIVER}", __name__, "OneHopSQLiteDialect")
