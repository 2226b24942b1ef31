"""A store statement compiled once into a plan the database driver can run directly.

``sqlite_fast`` (SQLite, on ``sqlite3``) and ``pg_fast`` (PostgreSQL, on asyncpg's prepared
statements) skip SQLAlchemy's execution path for the statements the store builds once, at
import. What they share lives here: compiling a statement object for one set of parameter
names (and lengths of its ``IN`` lists) into its positional SQL, where each parameter's value
comes from with its type's bind processor, and its result columns' keys and processors; the
bounded per-process cache of those plans; and building one execution's parameter tuple.

A statement seen for the first time gets no plan (one built per call would only fill the cache);
a statement that cannot be planned is remembered as such and keeps SQLAlchemy's path.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy.engine import Dialect
from sqlalchemy.engine.result import IteratorResult, SimpleResultMetaData
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.sql.dml import UpdateBase
from sqlalchemy.sql.selectable import CompoundSelect, Select

SEEN_ONCE = 256
"""Statement objects remembered after their first execution (strong references, bounded)."""
PLANS = 1024
"""Compiled plans kept, (statement, parameter names, executemany, IN-list lengths) -> plan."""

Value = tuple[int, Any, Callable[[Any], Any] | None]
"""Where a positional parameter comes from: (0, key) the caller's parameters, (1, value) the
statement's own bound value, (2, callable) a value computed per execution, (3, (key, i)) item
``i`` of the caller's list ``key`` (an ``IN`` list); and its processor."""

PLANNABLE = (Select, CompoundSelect, UpdateBase)
"""The statement kinds a plan is made for, on both drivers (a ``union_all`` too: its parts'
parameters compile positionally as a ``SELECT``'s do); anything else keeps SQLAlchemy's path."""

NO_COLUMNS = SimpleResultMetaData([])
"""The metadata of a result without columns (an UPDATE's): shared, as a plan's own is."""


class FastResult(IteratorResult[Any]):
    """A buffered result with the ``rowcount`` the store's compare-and-set reads.

    ``planned`` makes one with the row maker its plan built once (``Plan.rows``): SQLAlchemy's
    ``Result`` builds that maker (its ``_row_getter``: processors, keys, closures) anew for every
    result object, ~2 us of the ~4 a planned read's result cost. It sits where SQLAlchemy memoizes
    it, under a name listed in ``_memoized_keys``, so whatever resets those (``columns()``,
    ``unique()``, a soft close) drops it and SQLAlchemy builds its own again."""

    rowcount: int
    raw = None
    context = None
    _source_supports_scalars = False
    _memoized_keys = frozenset({"_row_getter"})

    @classmethod
    def planned(cls, metadata: SimpleResultMetaData, rows: Sequence[Any], rowcount: int, getter: Any) -> FastResult:
        """A result of ``rows`` (the driver's tuples, made ``Row``\\ s as they are fetched)."""
        result = cls.__new__(cls)
        result._metadata = metadata
        result.iterator = iter(rows)
        result.rowcount = rowcount
        if getter is not None:
            result.__dict__["_row_getter"] = getter
        return result


def _row_getter(metadata: SimpleResultMetaData | None) -> Any:
    """SQLAlchemy's row maker for ``metadata`` (no unique filter, no tuple filter, no row
    logging: a plain result's), built once per plan and shared by its results."""
    if metadata is None:
        return None
    return FastResult(metadata, iter(()))._row_getter


@dataclass(frozen=True, slots=True)
class Plan:
    """One statement with one set of parameter names and list lengths, ready for the driver.

    ``row`` builds one execution's positional parameters: a function generated for this plan's
    ``values`` (see ``_row_function``), called ~30,000 times per burst of runs."""

    statement: Any
    sql: str
    values: tuple[Value, ...]
    metadata: SimpleResultMetaData | None
    row: Callable[[Mapping[str, Any]], tuple[Any, ...]] = field(init=False, repr=False, compare=False)
    rows: Any = field(init=False, repr=False, compare=False)
    """``FastResult.planned``'s row maker for ``metadata``."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "row", _row_function(self.values))
        object.__setattr__(self, "rows", _row_getter(self.metadata))

    def result(self, rows: Sequence[Any], rowcount: int) -> FastResult:
        """One execution's result: ``rows`` as the driver returned them (tuples or records)."""
        return FastResult.planned(self.metadata or NO_COLUMNS, rows, rowcount, self.rows)


def _row_function(values: tuple[Value, ...]) -> Callable[[Mapping[str, Any]], tuple[Any, ...]]:
    """A function returning the positional parameters of one execution with ``params``, one
    tuple display of ``values``' sources: no loop, no branch on each value's kind, and no call
    where a type has no bind processor (a ``String``'s, an ``Integer``'s). A generic loop over
    ``values`` was ~1.5 us per execution of the store's statements in the event loop's CPU."""
    bound: dict[str, Any] = {}
    parts = []
    for i, (kind, source, processor) in enumerate(values):
        if kind == 0:
            bound[f"k{i}"] = source
            value = f"p[k{i}]"
        elif kind == 1:
            bound[f"c{i}"] = source
            value = f"c{i}"
        elif kind == 2:
            bound[f"c{i}"] = source
            value = f"c{i}()"
        else:
            bound[f"k{i}"], bound[f"j{i}"] = source
            value = f"p[k{i}][j{i}]"
        if processor is not None:
            bound[f"f{i}"] = processor
            value = f"f{i}({value})"
        parts.append(value + ",")
    # the values arrive as defaults: fast locals in the generated function, not global lookups
    source_text = f"def row(p, {''.join(f'{n}={n}, ' for n in bound)}):\n    return ({' '.join(parts)})\n"
    namespace = dict(bound)
    exec(compile(source_text, "<plan row>", "exec"), namespace)  # noqa: S102 - names only, no caller text
    row: Callable[[Mapping[str, Any]], tuple[Any, ...]] = namespace["row"]
    return row


def call_parameters(parameters: Any) -> tuple[Any, frozenset[str]] | None:
    """``execute``'s parameters as a mapping, or a list of mappings with the same names for
    executemany, and those names; None for anything else (SQLAlchemy's path)."""
    params: Any
    if type(parameters) is dict:  # the store's every single execution: no ABC check, no copy
        return parameters, frozenset(parameters)
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
    return params, keys


def _source(compiled: SQLCompiler, name: str, keys: frozenset[str]) -> Value | None:
    """How the positional parameter ``name`` is filled (see ``SQLCompiler.construct_params``)."""
    unescaped = {compiled.escaped_bind_names.get(n, n): n for n in compiled.bind_names.values()}.get(name, name)
    bindparam = next((b for b, n in compiled.bind_names.items() if n == unescaped), None)
    if bindparam is None or bindparam.type._is_tuple_type or bindparam.expanding:
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


def _expanded(compiled: SQLCompiler, lists: tuple[str, ...], params: Mapping[str, Any]
              ) -> tuple[str, list[str], dict[str, Value]] | None:
    """``IN`` lists rendered for ``params``' lengths of the caller's lists, as SQLAlchemy renders
    them per execution (placeholder values stand in for the caller's: only their number shapes
    the SQL), and lists the statement holds itself: the SQL, the positional names, and where
    each item's value comes from."""
    if any(b.callable for b in compiled.post_compile_params):
        return None
    placeholders: dict[str, Any] = {key: [None] * len(params[key]) for key in lists}
    expanded = compiled._process_parameters_for_postcompile(compiled.construct_params(placeholders, _check=False))
    names, fixed = list(expanded.positiontup or ()), dict[str, Value]()
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


def _compile(statement: Any, dialect: Dialect, keys: frozenset[str], params: Mapping[str, Any], many: bool,
             caller_lists: bool) -> tuple[tuple[str, ...], Plan | None]:
    """The caller's ``IN`` lists of ``statement`` (parameters named ``keys``), and its plan for
    ``params``' lengths of them, or None: SQLAlchemy's path. A caller's list takes that path
    unless ``caller_lists``; where it does not, executemany of a statement with any list does."""
    compiled = statement.compile(dialect=dialect, column_keys=sorted(keys), for_executemany=many)
    if not isinstance(compiled, SQLCompiler) or not compiled.positional or compiled.positiontup is None:
        return (), None
    lists = tuple(sorted(b.key for b in compiled.post_compile_params if b.key in keys))
    if lists and not caller_lists:
        return (), None  # one remembered answer whatever the lists' lengths
    unsupported = compiled.literal_execute_params or compiled.insert_prefetch or compiled.update_prefetch or (
        many and (compiled.effective_returning or compiled._insertmanyvalues is not None
                  or (caller_lists and compiled.post_compile_params)))
    if unsupported:
        return lists, None
    sql, names, fixed = compiled.string, list(compiled.positiontup), dict[str, Value]()
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
    """Per process and driver: statement objects seen once, the ``IN`` lists of those seen
    again, and their plans per length of those lists (None: the statement keeps SQLAlchemy's
    path, remembered so it is not compiled again). ``caller_lists``: whether a list the caller
    passes is planned per length (PostgreSQL) or left to SQLAlchemy (SQLite)."""

    def __init__(self, *, caller_lists: bool) -> None:
        self.caller_lists = caller_lists
        self.seen: OrderedDict[int, Any] = OrderedDict()
        self.lists: OrderedDict[tuple[int, frozenset[str], bool], tuple[Any, tuple[str, ...]]] = OrderedDict()
        self.plans: OrderedDict[tuple[Any, ...], tuple[Any, Plan | None]] = OrderedDict()
        self.known: dict[int, tuple[Any, frozenset[str], Plan | None]] = {}
        """id(statement) -> (statement, parameter names, plan or None): the last answer for a
        single execution without a caller's ``IN`` list, which a driver looks up before anything
        else (``sqlite_fast``): one dict lookup and a comparison of names, where ``plan`` takes
        the names' frozenset, three keys' hashes and two ``OrderedDict`` lookups."""

    def plan(self, statement: Any, dialect: Dialect, keys: frozenset[str], params: Mapping[str, Any],
             many: bool) -> Plan | None:
        shape = (id(statement), keys, many)
        lists = self.lists.get(shape)
        if lists is not None and lists[0] is statement:
            key = (*shape, tuple(len(params[k]) for k in lists[1])) if lists[1] else (*shape, ())
            known = self.plans.get(key)
            if known is not None and known[0] is statement:
                if not many and not lists[1]:
                    self._know(statement, keys, known[1])
                return known[1]
        elif self.seen.get(id(statement)) is not statement:
            self.seen[id(statement)] = statement
            if len(self.seen) > SEEN_ONCE:
                self.seen.popitem(last=False)
            return None
        names, plan = _compile(statement, dialect, keys, params, many, self.caller_lists)
        self.lists[shape] = (statement, names)
        if len(self.lists) > PLANS:
            self.lists.popitem(last=False)
        self.plans[(*shape, tuple(len(params[k]) for k in names))] = (statement, plan)
        if len(self.plans) > PLANS:
            self.plans.popitem(last=False)
        if not many and not names:
            self._know(statement, keys, plan)
        return plan

    def _know(self, statement: Any, keys: frozenset[str], plan: Plan | None) -> None:
        self.known[id(statement)] = (statement, keys, plan)
        if len(self.known) > PLANS:
            del self.known[next(iter(self.known))]
