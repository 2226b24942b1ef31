"""A SQLite write transaction's statements run straight on ``sqlite3``, compiled once.

Inside ``Database.transaction`` on SQLite the connection holds the write lock and runs its
statements on the event loop's thread (``sqlite_driver.begin_writing``). Each statement still
went through SQLAlchemy's whole execution path: a new greenlet, two switches and a coroutine
for an ``await`` that never waits, a cache-key lookup, an execution context, parameter
construction and a ``CursorResult``: ~100 µs of CPU for ~5 µs of SQLite work, and a run to
its approval wait is ~90 such statements, most of a run's CPU. Here a statement object that
comes back (the store's statements are built once, at import) is compiled once per set of
parameter names into its SQL string, where each positional parameter comes from, its type's
bind processor, and its result columns' keys and processors (``store/plans.py``, shared with
``pg_fast``); executing it is then building one tuple, one ``sqlite3`` call and a light
``Result`` with its plan's row maker. The plan of a statement seen before with the same parameter
names is found by the statement's identity (``Plans.known``), before any other check of the
statement or its parameters. Several parameter sets with RETURNING (an
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
from collections.abc import Mapping
from typing import Any

from sqlalchemy import exc
from sqlalchemy.ext.asyncio import AsyncConnection
from sqlalchemy.sql.dml import UpdateBase

from ira.runtime.store.plans import PLANNABLE, FastResult, Plan, Plans, call_parameters
from ira.runtime.store.sqlite_driver import OneHopConnection, run_statement

_PLANS = Plans(caller_lists=False)


_NO_PARAMETERS: dict[str, Any] = {}


class FastConnection(AsyncConnection):
    """``AsyncConnection`` whose ``execute`` takes the plan when it has one (see module doc)."""

    __slots__ = ()

    async def execute(  # type: ignore[override]
        self, statement: Any, parameters: Any = None, *, execution_options: Any = None,
    ) -> Any:
        raw = self._inline()
        if raw is not None and not execution_options:
            # the store's usual call, a statement planned before with the same parameter names:
            # the answer remembered for this statement object (``Plans.known``), nothing checked again
            params = _NO_PARAMETERS if parameters is None else parameters
            if type(params) is dict:
                known = _PLANS.known.get(id(statement))
                if known is not None and known[0] is statement and known[1] == params.keys():
                    if known[2] is not None:
                        return self._one(known[2], raw, params)
                    return await super().execute(statement, parameters, execution_options=execution_options)
        fast = self._fast(statement, parameters, execution_options, raw)
        if fast is None:
            return await super().execute(statement, parameters, execution_options=execution_options)
        plan, raw, params = fast
        if not isinstance(params, list):
            return self._one(plan, raw, params)
        if plan.metadata is not None:
            return self._each(plan, raw, params)
        description, rows, rowcount = self._run(plan, raw, [plan.row(p) for p in params], True)
        return plan.result(rows if description else (), rowcount)

    def _inline(self) -> sqlite3.Connection | None:
        """The ``sqlite3`` connection, if this connection writes inline (``begin_writing``) and
        nothing watches its statements (connection, engine or dialect events, echo): then a
        statement may run from its plan. None: SQLAlchemy's path."""
        sync = self.sync_connection
        if sync is None:
            return None
        pooled = sync._dbapi_connection  # None once closed or invalidated
        if pooled is None or sync._has_events or sync.engine._has_events or sync.dialect._has_events or sync._echo:
            return None
        adapted = pooled.dbapi_connection
        if not isinstance(adapted, OneHopConnection) or not adapted.inline:
            return None
        conn: sqlite3.Connection = adapted._connection._conn
        return conn

    def _one(self, plan: Plan, raw: sqlite3.Connection, params: Mapping[str, Any]) -> FastResult:
        """One execution of ``plan`` on the event loop's thread: its rows and rowcount."""
        bound = plan.row(params)
        try:
            cursor = raw.execute(plan.sql, bound)
            try:
                rows = cursor.fetchall() if cursor.description else ()
                rowcount = cursor.rowcount
            finally:
                cursor.close()
        except sqlite3.Error as error:
            raise exc.DBAPIError.instance(plan.sql, bound, error, sqlite3.Error,
                                          dialect=self.sync_engine.dialect) from error
        return plan.result(rows, rowcount)

    def _each(self, plan: Plan, raw: sqlite3.Connection, params: list[Mapping[str, Any]]) -> FastResult:
        """Several rows with RETURNING: one execution of the single-row plan per row, their rows in
        order (sqlite3's executemany returns no rows; SQLAlchemy's path renders one multi-row
        INSERT per batch instead, at ~100 µs of compiling per execution)."""
        out: list[Any] = []
        count = 0
        for one in params:
            _, rows, rowcount = self._run(plan, raw, plan.row(one), False)
            out.extend(rows)
            count += max(rowcount, 0)
        return plan.result(out, count)

    def _run(self, plan: Plan, raw: sqlite3.Connection, bound: Any, many: bool) -> tuple[Any, list[Any], int]:
        try:
            description, rows, rowcount, _ = run_statement(raw, plan.sql, bound, many)
        except sqlite3.Error as error:
            raise exc.DBAPIError.instance(plan.sql, bound, error, sqlite3.Error,
                                          dialect=self.sync_engine.dialect) from error
        return description, rows, rowcount

    def _fast(self, statement: Any, parameters: Any, execution_options: Any, raw: sqlite3.Connection | None
              ) -> tuple[Plan, sqlite3.Connection, Any] | None:
        """(plan, sqlite3 connection, parameters: a mapping, or a list of them for executemany)."""
        if raw is None or execution_options or not isinstance(statement, PLANNABLE) or statement._execution_options:
            return None
        called = call_parameters(parameters)
        if called is None:
            return None
        params, keys = called
        many = isinstance(params, list)
        if many and isinstance(statement, UpdateBase) and statement._returning:
            many = False  # run row by row from the single-row plan (``_each``)
        plan = _PLANS.plan(statement, self.sync_engine.dialect, keys,
                           params[0] if isinstance(params, list) else params, many)
        if plan is None:
            return None
        return plan, raw, params
