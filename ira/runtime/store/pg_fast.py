"""PostgreSQL: a transaction's statements run on asyncpg's prepared statements, compiled once.

Through SQLAlchemy a statement cost ~110 µs of CPU on this machine before asyncpg saw it (a
greenlet and its switches, a cache-key lookup, an execution context, parameter construction, a
``CursorResult``) against ~20 µs for asyncpg itself, and a durable step is a handful of them.
Here a statement object that comes back (the store's statements are built once, at import) is
compiled once per set of parameter names and lengths of its ``IN`` lists into its SQL string,
where each positional parameter comes from with its type's bind processor, and its result
columns' keys and processors (``store/plans.py``, shared with ``sqlite_fast``). Executing it is building one
tuple and one call of the asyncpg prepared statement that SQLAlchemy's own adapter caches for
that SQL on that connection (``_prepare``: the same cache, the same schema-change
invalidation), under the adapter's mutex and in the transaction it holds (started here, as
the adapter starts it, if this is the transaction's first statement). Atomicity, fencing and
the outbox in the same transaction are the caller's transaction's, unchanged.

Inserts whose result nobody reads may wait for the transaction's next statement
(:func:`write_later`): they go to the server in it, as its data-modifying CTEs, or on their own
before a statement that names one of their tables, and before COMMIT (``store/pg_combined.py``).
A new run's task, run, steps, attempts, events, outbox rows and root budget account went in
with seven statements; they go in with two (the run's INSERT carries the task, the rest goes
before the statement that holds the root's budget, which names the accounts' table).

A statement cancelled or broken mid-flight abandons its connection: it is invalidated, as
SQLAlchemy invalidates a connection on which a statement was interrupted (a cancelled task, a
lost connection). The statements run natively in session 5 (reverted) did not: a task cancelled
while its BEGIN was in flight (a heartbeat cancelled as its step finished) left asyncpg's
``_top_xact`` on the failed transaction while the server had begun one, so every later
transaction on that pooled connection was a SAVEPOINT inside a transaction that never committed:
its writes were never seen by others and its row locks never released (a run that never drafted).

Anything else takes SQLAlchemy's path unchanged: a statement seen for the first time (one built
per call would only fill the cache), one with execution options, Python-side defaults,
literal-execute parameters, executemany with RETURNING, or an engine with connection or dialect
events or echo (``before_cursor_execute`` listeners and SQL logging see every statement, so
tests that count statements count the same ones). Errors are SQLAlchemy's: asyncpg's exception
translated by the adapter and wrapped as ``DBAPIError.instance`` does (``IntegrityError`` stays
``IntegrityError``; a lost connection is reported ``connection_invalidated``).
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import asyncpg
from sqlalchemy import exc
from sqlalchemy.dialects.postgresql.asyncpg import AsyncAdapt_asyncpg_connection
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from ira.runtime.store.pg_combined import (
    MAX_PARAMETERS,
    Insert,
    Queued,
    Update,
    combined,
    plain_update,
    rides_along,
    values_insert,
)
from ira.runtime.store.plans import PLANNABLE, Plan, Plans, call_parameters

_ROWCOUNT = re.compile(r"(?:SELECT|UPDATE|DELETE|INSERT \d+) (\d+)")
_PLANS = Plans(caller_lists=True)
LATER = "ira.pg_fast.later"
"""``conn.info`` key of a write transaction's queue of writes sent with its next statement
(:func:`write_later`); ``Database.transaction`` sets it, and sends what is left before COMMIT."""


async def write_later(conn: AsyncConnection, statement: Any, parameters: Any) -> None:
    """Execute ``statement``, an INSERT or an UPDATE whose result (rows, row count) the caller
    does not read, with the transaction's next statement instead of on its own
    (``pg_combined``): one round trip fewer per write that waits. Where that cannot be
    (SQLite, a statement not yet planned or not a plain ``VALUES`` insert or ``UPDATE .. SET``
    without RETURNING, no queue: outside ``Database.transaction``), at once.

    An error of the write (a duplicate key) is raised by the statement it goes with, in the
    same transaction: a caller that must tell its own write's failure apart uses ``execute``."""
    if not (isinstance(conn, FastConnection) and conn.queue_later(statement, parameters)):
        await conn.execute(statement, parameters)


async def flush_later(conn: AsyncConnection) -> None:
    """Send the writes still waiting (before COMMIT: ``Database.transaction``)."""
    if isinstance(conn, FastConnection):
        await conn.flush_later()


class FastConnection(AsyncConnection):
    """``AsyncConnection`` whose ``execute`` takes the plan when it has one (see module doc)."""

    __slots__ = ()

    async def execute(  # type: ignore[override]
        self, statement: Any, parameters: Any = None, *, execution_options: Any = None,
    ) -> Any:
        fast = self._fast(statement, parameters, execution_options)
        waiting = self._waiting()
        if waiting:
            if fast is not None and not isinstance(fast[2], list) and rides_along(fast[0].sql, waiting):
                return await self._with_waiting(waiting, *fast)
            await self.flush_later()
        if fast is None:
            return await super().execute(statement, parameters, execution_options=execution_options)
        plan, adapted, params = fast
        many = isinstance(params, list)
        bound: Any = [plan.row(p) for p in params] if many else plan.row(params)
        rows, status = await self._run(adapted, plan.sql, bound, many)
        found = _ROWCOUNT.match(status or "")
        return plan.result(rows, int(found.group(1)) if found else -1)

    def _waiting(self) -> list[Queued] | None:
        """This transaction's queue of writes (:func:`write_later`); None outside one that has it."""
        sync = self.sync_connection
        if sync is None or sync.closed or sync.invalidated:
            return None
        waiting: list[Queued] | None = sync.info.get(LATER)
        return waiting

    def queue_later(self, statement: Any, parameters: Any) -> bool:
        """Queue ``statement`` (:func:`write_later`); False where it must run at once."""
        waiting = self._waiting()
        fast = self._fast(statement, parameters, None) if waiting is not None else None
        if fast is None or waiting is None:
            return False
        plan, _, params = fast
        shape = values_insert(plan.sql)
        item: Queued
        before: list[Queued]
        if shape is not None:  # beside what waits, except after a waiting UPDATE of a table it names
            head, row, width, tail = shape
            item = Insert(head, row, width, [plan.row(p) for p in params] if isinstance(params, list) else
                          [plan.row(params)], tail)
            before = [w for w in waiting if isinstance(w, Update)]
        elif not isinstance(params, list) and plain_update(plan.sql):  # it must see every write waiting before it
            item, before = Update(plan.sql, tuple(plan.row(params))), waiting
        else:
            return False
        if before and not rides_along(plan.sql, before):
            return False  # then it goes at once, after them (execute sends them first)
        if sum(w.parameters for w in waiting) + item.parameters > MAX_PARAMETERS:
            return False
        waiting.append(item)
        return True

    async def flush_later(self) -> None:
        waiting = self._waiting()
        if not waiting:
            return
        sync = self.sync_connection
        assert sync is not None
        sql, values = combined(waiting)
        waiting.clear()  # sent or not, they are this transaction's: a failure fails it
        await self._run(sync.connection.dbapi_connection, sql, values, False)  # type: ignore[arg-type]

    async def _with_waiting(self, waiting: list[Queued], plan: Plan, adapted: AsyncAdapt_asyncpg_connection,
                            params: Any) -> Any:
        """``plan`` executed with the waiting writes in front of it, in one statement."""
        bound = plan.row(params)
        if sum(w.parameters for w in waiting) + len(bound) > MAX_PARAMETERS:
            await self.flush_later()
            sql, values = plan.sql, list(bound)
        else:
            sql, values = combined(waiting, plan.sql, bound)
            waiting.clear()
        rows, status = await self._run(adapted, sql, values, False)
        found = _ROWCOUNT.match(status or "")
        return plan.result(rows, int(found.group(1)) if found else -1)

    async def _run(self, adapted: AsyncAdapt_asyncpg_connection, sql: str, bound: Any, many: bool
                   ) -> tuple[Sequence[Any], str | None]:
        """Under the adapter's mutex, in its transaction (begun here if not yet): the rows and
        the command status. Anything that interrupts it abandons the connection (module doc)."""
        dialect = self.sync_engine.dialect
        try:
            async with adapted._execute_mutex:
                if adapted._transaction is None:
                    try:
                        await adapted._start_transaction()
                    except Exception:
                        # asyncpg may be left with a failed top-level transaction while the server
                        # began one: never hand this connection out again (a cancellation: below)
                        self._abandon(adapted)
                        raise
                if many:
                    await adapted._connection.executemany(sql, bound)
                    return (), None
                asof = dialect._invalidate_schema_cache_asof  # type: ignore[attr-defined]
                prepared, _ = await adapted._prepare(sql, asof)  # type: ignore[no-untyped-call]
                return await prepared.fetch(*bound), prepared.get_statusmsg()
        except exc.DBAPIError:
            raise
        except Exception as error:
            raise self._translated(adapted, sql, bound, error) from error
        except BaseException:
            await self._close_cancelled(adapted)  # cancelled mid-statement: the connection goes
            raise

    async def _close_cancelled(self, adapted: AsyncAdapt_asyncpg_connection) -> None:
        """Close a connection whose statement (or BEGIN) was interrupted as SQLAlchemy's adapter
        closes one it invalidates (``_terminate_graceful_close``): asyncpg's ``close`` first has
        the server cancel the statement in flight, then ends the session, within 2 s; the socket
        is cut if that fails or a second cancellation comes. Cutting it at once left a statement
        waiting for a lock queued on the server, a dead client's, until the lock's holder ended."""
        connection = adapted._connection
        try:
            await asyncio.shield(connection.close(timeout=2))
        except (TimeoutError, asyncio.CancelledError, OSError, asyncpg.PostgresError, asyncpg.InterfaceError):
            connection.terminate()  # the caller raises what interrupted the statement
        finally:
            self._abandon(adapted)

    def _translated(self, adapted: AsyncAdapt_asyncpg_connection, sql: str, bound: Any,
                    error: Exception) -> Exception:
        """asyncpg's exception as SQLAlchemy's path raises it (the adapter's DBAPI class wrapped
        in ``DBAPIError.instance``); a lost connection is invalidated and reported so."""
        dialect = self.sync_engine.dialect
        dbapi = dialect.loaded_dbapi
        if isinstance(error, dbapi.InvalidCachedStatementError | dbapi.InternalServerError):
            dialect._invalidate_schema_cache()  # type: ignore[attr-defined]  # as PGExecutionContext_asyncpg
        translated: Exception = error
        if not isinstance(error, dbapi.Error):
            try:
                adapted._handle_exception(error)
            except Exception as raised:  # noqa: BLE001  # _handle_exception always raises
                translated = raised
        if not isinstance(translated, dbapi.Error):
            return translated
        lost = dialect.is_disconnect(translated, adapted, None)  # type: ignore[arg-type]
        if lost:
            self._abandon(adapted)
        return exc.DBAPIError.instance(sql, bound, translated, dbapi.Error, connection_invalidated=lost,
                                       dialect=dialect)

    def _abandon(self, adapted: AsyncAdapt_asyncpg_connection) -> None:
        """Close the connection at once and invalidate it: the transaction ends with it (the
        server rolls back), the pool opens a new one, and this ``Connection`` can no longer
        commit (a caller that went on would get SQLAlchemy's invalidated-connection error)."""
        adapted._transaction = None
        adapted._connection.terminate()
        sync = self.sync_connection
        if sync is not None and not sync.closed and not sync.invalidated:
            sync.invalidate()

    def _fast(self, statement: Any, parameters: Any, execution_options: Any
              ) -> tuple[Plan, AsyncAdapt_asyncpg_connection, Any] | None:
        """(plan, the adapter, parameters: a mapping, or a list of them for executemany)."""
        if execution_options or not isinstance(statement, PLANNABLE) or statement._execution_options:
            return None
        sync = self.sync_connection
        if sync is None or sync.closed or sync.invalidated or sync._has_events or sync.engine._has_events \
                or sync.dialect._has_events or sync._echo:
            return None
        adapted = sync.connection.dbapi_connection
        if not isinstance(adapted, AsyncAdapt_asyncpg_connection):
            return None
        called = call_parameters(parameters)
        if called is None:
            return None
        params, keys = called
        many = isinstance(params, list)
        plan = _PLANS.plan(statement, sync.engine.dialect, keys, params[0] if many else params, many)
        if plan is None:
            return None
        if sync._transaction is None:
            sync.begin()  # SQLAlchemy's autobegin (no I/O on asyncpg): a later commit() commits this
        return plan, adapted, params


def began(conn: AsyncConnection) -> bool:
    """Whether ``conn``'s transaction sent anything to the server yet (asyncpg's BEGIN goes with
    the first statement): one that has not holds no lock. False on anything but asyncpg."""
    sync = conn.sync_connection
    if sync is None or sync.closed or sync.invalidated:
        return False
    adapted = sync.connection.dbapi_connection
    return isinstance(adapted, AsyncAdapt_asyncpg_connection) and adapted._transaction is not None


@contextmanager
def reading_without_transaction(conn: AsyncConnection) -> Iterator[None]:
    """While the block runs, ``conn``'s statements run without BEGIN and ROLLBACK around them
    (asyncpg's autocommit, as the adapter's ``autocommit`` attribute sets it): two round trips
    fewer per read. A read-only view loses nothing by it: at PostgreSQL's READ COMMITTED each
    statement reads its own snapshot inside a transaction too. Left as it was if a transaction
    is open already; set back before the connection can return to the pool."""
    sync = conn.sync_connection
    adapted = sync.connection.dbapi_connection if sync is not None and not sync.closed else None
    if not isinstance(adapted, AsyncAdapt_asyncpg_connection) or adapted._transaction is not None:
        yield
        return
    adapted.autocommit = True
    try:
        yield
    finally:
        adapted.autocommit = False


class FastEngine(AsyncEngine):
    """An ``AsyncEngine`` whose connections are :class:`FastConnection`\\ s."""

    __slots__ = ()
    _connection_cls = FastConnection
