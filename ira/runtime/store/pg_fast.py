"""PostgreSQL: a transaction's statements run on asyncpg's prepared statements, compiled once.

Through SQLAlchemy a statement cost ~110 µs of CPU on this machine before asyncpg saw it (a
greenlet and its switches, a cache-key lookup, an execution context, parameter construction, a
``CursorResult``) against ~20 µs for asyncpg itself, and a durable step is a handful of them.
Here a statement object that comes back (the store's statements are built once, at import) is
compiled once per set of parameter names and lengths of its ``IN`` lists into its SQL string,
where each positional parameter comes from with its type's bind processor, and its result
columns' keys and processors, as ``sqlite_fast`` does on SQLite. Executing it is building one
tuple and one call of the asyncpg prepared statement that SQLAlchemy's own adapter caches for
that SQL on that connection (``_prepare``: the same cache, the same schema-change
invalidation), under the adapter's mutex and in the transaction it holds (started here, as
the adapter starts it, if this is the transaction's first statement). Atomicity, fencing and
the outbox in the same transaction are the caller's transaction's, unchanged.

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
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import asyncpg
from sqlalchemy import exc
from sqlalchemy.dialects.postgresql.asyncpg import AsyncAdapt_asyncpg_connection
from sqlalchemy.engine import Dialect
from sqlalchemy.engine.result import IteratorResult, SimpleResultMetaData
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.sql.dml import UpdateBase
from sqlalchemy.sql.selectable import Select

SEEN_ONCE = 256
"""Statement objects remembered after their first execution (strong references, bounded)."""
PLANS = 1024
"""Compiled plans kept, (statement, parameter names, IN-list lengths, executemany) -> plan."""

_Value = tuple[int, Any, Callable[[Any], Any] | None]
"""Where a positional parameter comes from: (0, key) the caller's parameters, (1, value) the
statement's own bound value, (2, callable) a value computed per execution, (3, (key, i)) item
``i`` of the caller's list ``key`` (an ``IN`` list); and its processor."""

_ROWCOUNT = re.compile(r"(?:SELECT|UPDATE|DELETE|INSERT \d+) (\d+)")


class FastResult(IteratorResult[Any]):
    """A buffered result with the ``rowcount`` the store's conditional UPDATEs read."""

    rowcount: int


@dataclass(frozen=True, slots=True)
class Plan:
    """One statement with one set of parameter names and list lengths, ready for asyncpg."""

    statement: Any
    sql: str
    values: tuple[_Value, ...]
    metadata: SimpleResultMetaData | None


def _source(compiled: SQLCompiler, name: str, keys: frozenset[str]) -> _Value | None:
    """How the positional parameter ``name`` is filled (see ``SQLCompiler.construct_params``)."""
    bindparam = next((b for b, n in compiled.bind_names.items() if n == name), None)
    if bindparam is None or bindparam.type._is_tuple_type or bindparam.expanding:
        return None
    processor = bindparam.type._cached_bind_processor(compiled.dialect)
    if bindparam.key in keys:
        return (0, bindparam.key, processor)
    if name in keys:
        return (0, name, processor)
    if bindparam.required:
        return None  # SQLAlchemy's path raises its own error
    if bindparam.callable:
        return (2, bindparam.callable, processor)
    return (1, bindparam.value, processor)


def _expanded(compiled: SQLCompiler, lists: tuple[str, ...], params: Mapping[str, Any]
              ) -> tuple[str, list[str], dict[str, _Value]] | None:
    """``IN`` lists rendered for ``params``' lengths of the caller's lists, as SQLAlchemy renders
    them per execution (placeholder values stand in for the caller's: only their number shapes
    the SQL): the SQL, the positional names, and where each item's value comes from."""
    if any(b.callable for b in compiled.post_compile_params):
        return None
    placeholders: dict[str, Any] = {key: [None] * len(params[key]) for key in lists}
    expanded = compiled._process_parameters_for_postcompile(compiled.construct_params(placeholders, _check=False))
    names, fixed = list(expanded.positiontup or ()), dict[str, _Value]()
    for base, items in expanded.parameter_expansion.items():
        bind = next((b for b, n in compiled.bind_names.items() if n == base), None)
        if bind is None:
            return None
        for i, item in enumerate(items):
            processor = expanded.processors.get(item)
            # the caller's list, item i; or a list the statement itself holds
            fixed[item] = (3, (bind.key, i), processor) if bind.key in placeholders \
                else (1, expanded.parameters[item], processor)  # type: ignore[assignment]
    own = set(compiled.positiontup or ())
    if any(n not in own and n not in fixed for n in names):
        return None
    return expanded.statement, names, fixed


def _compile(statement: Any, dialect: Dialect, keys: frozenset[str], params: Mapping[str, Any],
             many: bool) -> tuple[tuple[str, ...], Plan | None]:
    """The caller's ``IN`` lists of ``statement`` (parameters named ``keys``), and its plan for
    ``params``' lengths of them, or None: SQLAlchemy's path."""
    compiled = statement.compile(dialect=dialect, column_keys=sorted(keys), for_executemany=many)
    if not isinstance(compiled, SQLCompiler) or not compiled.positional or compiled.positiontup is None:
        return (), None
    lists = tuple(sorted(b.key for b in compiled.post_compile_params if b.key in keys))
    unsupported = compiled.literal_execute_params or compiled.insert_prefetch or compiled.update_prefetch or (
        many and (compiled.effective_returning or compiled._insertmanyvalues is not None
                  or compiled.post_compile_params))
    if unsupported:
        return lists, None
    sql, names, fixed = compiled.string, list(compiled.positiontup), dict[str, _Value]()
    if compiled.post_compile_params:
        found = _expanded(compiled, lists, params)
        if found is None:
            return lists, None
        sql, names, fixed = found
    values = tuple(fixed.get(name) or _source(compiled, name, keys) for name in names)
    if any(v is None for v in values):
        return lists, None
    metadata = None
    if compiled._result_columns:
        columns = compiled._result_columns
        metadata = SimpleResultMetaData(
            [c.keyname for c in columns], extra=[c.objects for c in columns],
            _processors=[c.type._cached_result_processor(dialect, None) for c in columns])
    return lists, Plan(statement=statement, sql=sql, values=values, metadata=metadata)  # type: ignore[arg-type]


class Plans:
    """Per process: statement objects seen once, the ``IN`` lists of those seen again, and their
    plans per length of those lists (None: the statement keeps SQLAlchemy's path, remembered so
    it is not compiled again)."""

    def __init__(self) -> None:
        self.seen: OrderedDict[int, Any] = OrderedDict()
        self.lists: OrderedDict[tuple[int, frozenset[str], bool], tuple[Any, tuple[str, ...]]] = OrderedDict()
        self.plans: OrderedDict[tuple[Any, ...], tuple[Any, Plan | None]] = OrderedDict()

    def plan(self, statement: Any, dialect: Dialect, keys: frozenset[str], params: Mapping[str, Any],
             many: bool) -> Plan | None:
        shape = (id(statement), keys, many)
        lists = self.lists.get(shape)
        if lists is not None and lists[0] is statement:
            key = (*shape, tuple(len(params[k]) for k in lists[1]))
            known = self.plans.get(key)
            if known is not None and known[0] is statement:
                return known[1]
        elif self.seen.get(id(statement)) is not statement:
            self.seen[id(statement)] = statement
            if len(self.seen) > SEEN_ONCE:
                self.seen.popitem(last=False)
            return None
        names, plan = _compile(statement, dialect, keys, params, many)
        self.lists[shape] = (statement, names)
        if len(self.lists) > PLANS:
            self.lists.popitem(last=False)
        self.plans[(*shape, tuple(len(params[k]) for k in names))] = (statement, plan)
        if len(self.plans) > PLANS:
            self.plans.popitem(last=False)
        return plan


_PLANS = Plans()


def _row_values(plan: Plan, params: Mapping[str, Any]) -> tuple[Any, ...]:
    out = []
    for kind, source, processor in plan.values:
        if kind == 0:
            value = params[source]
        elif kind == 1:
            value = source
        elif kind == 2:
            value = source()
        else:
            value = params[source[0]][source[1]]
        out.append(processor(value) if processor is not None else value)
    return tuple(out)


class FastConnection(AsyncConnection):
    """``AsyncConnection`` whose ``execute`` takes the plan when it has one (see module doc)."""

    __slots__ = ()

    async def execute(  # type: ignore[override]
        self, statement: Any, parameters: Any = None, *, execution_options: Any = None,
    ) -> Any:
        fast = self._fast(statement, parameters, execution_options)
        if fast is None:
            return await super().execute(statement, parameters, execution_options=execution_options)
        plan, adapted, params = fast
        many = isinstance(params, list)
        bound: Any = [_row_values(plan, p) for p in params] if many else _row_values(plan, params)
        rows, status = await self._run(adapted, plan.sql, bound, many)
        result = FastResult(plan.metadata or SimpleResultMetaData([]), iter(rows))
        found = _ROWCOUNT.match(status or "")
        result.rowcount = int(found.group(1)) if found else -1
        return result

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
        if execution_options or not isinstance(statement, Select | UpdateBase) or statement._execution_options:
            return None
        sync = self.sync_connection
        if sync is None or sync.closed or sync.invalidated or sync._has_events or sync.engine._has_events \
                or sync.dialect._has_events or sync._echo:
            return None
        adapted = sync.connection.dbapi_connection
        if not isinstance(adapted, AsyncAdapt_asyncpg_connection):
            return None
        params: Any
        if parameters is None or isinstance(parameters, Mapping):
            params = parameters or {}
        elif isinstance(parameters, Sequence) and parameters and all(isinstance(p, Mapping) for p in parameters):
            params = list(parameters) if len(parameters) > 1 else parameters[0]
        else:
            return None
        many = isinstance(params, list)
        keys = frozenset(params[0] if many else params)
        if many and any(frozenset(p) != keys for p in params):
            return None
        plan = _PLANS.plan(statement, sync.engine.dialect, keys, params[0] if many else params, many)
        if plan is None:
            return None
        if sync._transaction is None:
            sync.begin()  # SQLAlchemy's autobegin (no I/O on asyncpg): a later commit() commits this
        return plan, adapted, params


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
