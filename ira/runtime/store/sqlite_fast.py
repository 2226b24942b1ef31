"""A SQLite write transaction's statements run straight on ``sqlite3``, compiled once.

Inside ``Database.transaction`` on SQLite the connection holds the write lock and runs its
statements on the event loop's thread (``sqlite_driver.begin_writing``). Each statement still
went through SQLAlchemy's whole execution path: a new greenlet, two switches and a coroutine
for an ``await`` that never waits, a cache-key lookup, an execution context, parameter
construction and a ``CursorResult``: ~100 µs of CPU for ~5 µs of SQLite work, and a run to
its approval wait is ~90 such statements, most of a run's CPU. Here a statement object that
comes back (the store's statements are built once, at import) is compiled once per set of
parameter names into its SQL string, where each positional parameter comes from, its type's
bind processor, and its result columns' keys and processors; executing it is then building one
tuple, one ``sqlite3`` call and a light ``Result``. Several parameter sets with RETURNING (an
``INSERT .. ON CONFLICT DO NOTHING RETURNING`` of several rows) run the single-row plan once per
set, in order, their rows concatenated.

Anything else takes SQLAlchemy's path unchanged: a statement seen for the first time (one
built per call would only fill the cache), one with execution options, expanding (``IN``)
parameters the caller passes, Python-side defaults, a connection
not writing inline, or an engine with connection or dialect events or echo (``before_cursor_execute``
listeners and SQL logging see every statement, so tests that count statements count the same
ones). Errors are SQLAlchemy's: sqlite3's exception wrapped as ``DBAPIError.instance`` does
(``IntegrityError`` stays ``IntegrityError``).
"""

from __future__ import annotations

import sqlite3
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import exc
from sqlalchemy.engine import Dialect
from sqlalchemy.engine.result import IteratorResult, SimpleResultMetaData
from sqlalchemy.ext.asyncio import AsyncConnection
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.sql.dml import UpdateBase
from sqlalchemy.sql.selectable import CompoundSelect, Select

from ira.runtime.store.sqlite_driver import OneHopConnection, run_statement

SEEN_ONCE = 256
"""Statement objects remembered after their first execution (strong references, bounded)."""
PLANS = 1024
"""Compiled plans kept, (statement, parameter names, executemany) -> plan; the oldest is dropped."""

_Value = tuple[int, Any, Callable[[Any], Any] | None]
"""Where a positional parameter comes from: (0, key) the caller's parameters, (1, value) the
statement's own bound value, (2, callable) a value computed per execution; and its processor."""


class FastResult(IteratorResult[Any]):
    """A buffered result with the ``rowcount`` the store's compare-and-set reads."""

    rowcount: int


@dataclass(frozen=True, slots=True)
class Plan:
    """One statement with one set of parameter names, ready to run on ``sqlite3``."""

    statement: Any
    sql: str
    values: tuple[_Value, ...]
    metadata: SimpleResultMetaData | None


def _source(compiled: SQLCompiler, name: str, keys: frozenset[str]) -> _Value | None:
    """How the positional parameter ``name`` is filled (see ``SQLCompiler.construct_params``)."""
    unescaped = {compiled.escaped_bind_names.get(n, n): n for n in compiled.bind_names.values()}.get(name, name)
    bindparam = next((b for b, n in compiled.bind_names.items() if n == unescaped), None)
    if bindparam is None or bindparam.type._is_tuple_type:
        return None
    processor = bindparam.type._cached_bind_processor(compiled.dialect)
    if bindparam.key in keys:
        return (0, bindparam.key, processor)
    if unescaped in keys:
        return (0, unescaped, processor)
    if bindparam.required:
        return None  # SQLAlchemy's path raises its own error
    if bindparam.callable:
        return (2, bindparam.callable, processor)
    return (1, bindparam.value, processor)


def _compile(statement: Any, dialect: Dialect, keys: frozenset[str], many: bool) -> Plan | None:
    """The plan for ``statement`` with parameters named ``keys``, or None: SQLAlchemy's path."""
    compiled = statement.compile(dialect=dialect, column_keys=sorted(keys), for_executemany=many)
    if not isinstance(compiled, SQLCompiler) or not compiled.positional or compiled.positiontup is None:
        return None
    if compiled.literal_execute_params or compiled.insert_prefetch or compiled.update_prefetch:
        return None
    if many and (compiled.effective_returning or compiled._insertmanyvalues is not None):
        return None
    sql, names, fixed = compiled.string, list(compiled.positiontup), {}
    if compiled.post_compile_params:
        # ``IN`` a list the statement itself holds (``state.in_((...))``): rendered once, as
        # SQLAlchemy renders it per execution. A list the caller passes changes the SQL: its path.
        if any(b.key in keys or b.callable for b in compiled.post_compile_params):
            return None
        expanded = compiled._process_parameters_for_postcompile(compiled.construct_params(_check=False))
        sql, names = expanded.statement, list(expanded.positiontup or ())
        own = set(compiled.positiontup)
        fixed = {n: (1, expanded.parameters[n], expanded.processors.get(n)) for n in names if n not in own}
    values = tuple(fixed.get(name) or _source(compiled, name, keys) for name in names)
    if any(v is None for v in values):
        return None
    metadata = None
    if compiled._result_columns:
        columns = compiled._result_columns
        metadata = SimpleResultMetaData(
            [c.keyname for c in columns], extra=[c.objects for c in columns],
            _processors=[c.type._cached_result_processor(dialect, None) for c in columns])
    return Plan(statement=statement, sql=sql, values=values, metadata=metadata)  # type: ignore[arg-type]


class Plans:
    """Per process: statement objects seen once, and the plans of those seen again (None: the
    statement keeps SQLAlchemy's path, remembered so it is not compiled again)."""

    def __init__(self) -> None:
        self.seen: OrderedDict[int, Any] = OrderedDict()
        self.plans: OrderedDict[tuple[int, frozenset[str], bool], tuple[Any, Plan | None]] = OrderedDict()

    def plan(self, statement: Any, dialect: Dialect, keys: frozenset[str], many: bool) -> Plan | None:
        key = (id(statement), keys, many)
        known = self.plans.get(key)
        if known is not None and known[0] is statement:
            return known[1]
        if self.seen.get(id(statement)) is not statement:
            self.seen[id(statement)] = statement
            if len(self.seen) > SEEN_ONCE:
                self.seen.popitem(last=False)
            return None
        plan = _compile(statement, dialect, keys, many)
        self.plans[key] = (statement, plan)
        if len(self.plans) > PLANS:
            self.plans.popitem(last=False)
        return plan


_PLANS = Plans()
_PLANNABLE = (Select, CompoundSelect, UpdateBase)
_NO_COLUMNS = SimpleResultMetaData([])
"""The metadata of a result without columns (an UPDATE's): shared, as a plan's own is."""


def _row_values(plan: Plan, params: Mapping[str, Any]) -> tuple[Any, ...]:
    out = []
    for kind, source, processor in plan.values:
        value = params[source] if kind == 0 else source if kind == 1 else source()
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
        plan, raw, params = fast
        if isinstance(params, list) and plan.metadata is not None:
            return self._each(plan, raw, params)
        many = isinstance(params, list)
        bound: Any = [_row_values(plan, p) for p in params] if many else _row_values(plan, params)
        description, rows, rowcount = self._run(plan, raw, bound, many)
        result = FastResult(plan.metadata or _NO_COLUMNS, iter(rows if description else ()))
        result.rowcount = rowcount
        return result

    def _each(self, plan: Plan, raw: sqlite3.Connection, params: list[Mapping[str, Any]]) -> FastResult:
        """Several rows with RETURNING: one execution of the single-row plan per row, their rows in
        order (sqlite3's executemany returns no rows; SQLAlchemy's path renders one multi-row
        INSERT per batch instead, at ~100 µs of compiling per execution)."""
        out: list[Any] = []
        count = 0
        for one in params:
            _, rows, rowcount = self._run(plan, raw, _row_values(plan, one), False)
            out.extend(rows)
            count += max(rowcount, 0)
        assert plan.metadata is not None
        result = FastResult(plan.metadata, iter(out))
        result.rowcount = count
        return result

    def _run(self, plan: Plan, raw: sqlite3.Connection, bound: Any, many: bool) -> tuple[Any, list[Any], int]:
        try:
            description, rows, rowcount, _ = run_statement(raw, plan.sql, bound, many)
        except sqlite3.Error as error:
            raise exc.DBAPIError.instance(plan.sql, bound, error, sqlite3.Error,
                                          dialect=self.sync_engine.dialect) from error
        return description, rows, rowcount

    def _fast(self, statement: Any, parameters: Any, execution_options: Any
              ) -> tuple[Plan, sqlite3.Connection, Any] | None:
        """(plan, sqlite3 connection, parameters: a mapping, or a list of them for executemany)."""
        if execution_options or not isinstance(statement, _PLANNABLE) or statement._execution_options:
            return None
        sync = self.sync_connection
        if sync is None or sync.closed or sync._has_events or sync.engine._has_events or sync.dialect._has_events \
                or sync._echo:
            return None
        adapted = sync.connection.dbapi_connection
        if not isinstance(adapted, OneHopConnection) or not adapted.inline:
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
        if many and isinstance(statement, UpdateBase) and statement._returning:
            many = False  # run row by row from the single-row plan (``_each``)
        plan = _PLANS.plan(statement, sync.engine.dialect, keys, many)
        if plan is None:
            return None
        return plan, adapted._connection._conn, params
