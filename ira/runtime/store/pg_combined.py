"""PostgreSQL: several INSERTs (and UPDATEs) of a transaction sent as one statement (one round trip).

A write transaction's INSERTs and UPDATEs whose result nobody reads (``pg_fast.write_later``) wait in a
queue and go to the server with the transaction's next statement, or before its COMMIT, as the
data-modifying CTEs of one statement:

    WITH w0 AS (INSERT INTO tasks (..) VALUES ($1, ..)), w1 AS (INSERT INTO steps (..) VALUES
    ($7, ..), ($15, ..)) INSERT INTO runs (..) VALUES ($23, ..) RETURNING ..

Every part runs once, to completion, whatever the last part reads; a failure of any part fails
the statement and with it the transaction, as it would have failed it alone. The parts see
the database as it was before the statement, not each other's rows, so the queue rides only
in a statement that names none of the queued tables (it cannot read their rows, or conflict
with them); before any other the queue goes out on its own. Foreign keys are checked at the
end of the statement, so a row and the row it references may go in the same one (a run and
its steps, a step and the run's compare-and-set).

Only an ``INSERT INTO t (columns) VALUES (parameters)`` as SQLAlchemy compiles it for asyncpg
(every value a ``$n`` with its cast) is queued: its rows are renumbered and listed, nothing of
its text is interpreted beyond that; and an ``UPDATE t SET .. WHERE ..`` that returns nothing
(a timer disarmed, work items closed), its parameters renumbered. An UPDATE that waits takes
its rows' locks when it goes out, still before COMMIT and still after every statement the
transaction sent before it: the order in which the transaction locks rows it takes first (the
run's) is unchanged.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

MAX_PARAMETERS = 32767
"""PostgreSQL's limit of parameters of one statement (a 16-bit count in the protocol)."""

_PARAMETER = re.compile(r"\$(\d+)")
_VALUE = r"\$\d+(?:::[A-Z][A-Z ]*(?:\[\])?)?"
"""One value of a row as SQLAlchemy compiles it for asyncpg: ``$3`` or ``$3::TIMESTAMP WITH TIME ZONE``."""
_VALUES_INSERT = re.compile(
    rf"(INSERT INTO \S+ \([^()]*\)) VALUES (\({_VALUE}(?:, {_VALUE})*\))( ON CONFLICT DO NOTHING)?")
_STATEMENT = re.compile(r"(?:WITH (?!RECURSIVE)|SELECT |INSERT |UPDATE |DELETE )")
_PLAIN_UPDATE = re.compile(r"UPDATE (\S+) SET [^;]*")


@dataclass(frozen=True, slots=True)
class Insert:
    """A queued INSERT: the part before ``VALUES``, one row's ``($1::T, ..)`` numbered from 1,
    how many parameters a row takes, each row's values, and what follows them (``ON CONFLICT
    DO NOTHING`` or nothing)."""

    head: str
    row: str
    width: int
    rows: Sequence[tuple[Any, ...]]
    tail: str = ""

    @property
    def parameters(self) -> int:
        return self.width * len(self.rows)

    @property
    def table(self) -> str:
        return self.head.split(" ", 3)[2]


@dataclass(frozen=True, slots=True)
class Update:
    """A queued UPDATE that returns nothing: its SQL numbered from 1 and its values."""

    sql: str
    values: tuple[Any, ...]

    @property
    def parameters(self) -> int:
        return len(self.values)

    @property
    def table(self) -> str:
        return self.sql.split(" ", 2)[1]


Queued = Insert | Update


@lru_cache(maxsize=256)
def plain_update(sql: str) -> bool:
    """Whether ``sql`` is one ``UPDATE t SET .. [WHERE ..]`` with no CTE and no RETURNING."""
    return _PLAIN_UPDATE.fullmatch(sql) is not None and " RETURNING " not in sql


@lru_cache(maxsize=256)
def values_insert(sql: str) -> tuple[str, str, int, str] | None:
    """(head, row, width, tail) if ``sql`` is a plain ``INSERT .. VALUES (..)``, maybe with ``ON
    CONFLICT DO NOTHING`` (two rows of one key in one statement: one goes in, as in two); None
    for anything else (RETURNING, a SELECT, another conflict clause)."""
    found = _VALUES_INSERT.fullmatch(sql)
    if found is None:
        return None
    width = max(int(n) for n in _PARAMETER.findall(found.group(2)))
    return found.group(1), found.group(2), width, found.group(3) or ""


def rides_along(sql: str, queued: Sequence[Queued]) -> bool:
    """Whether the statement ``sql`` can carry ``queued`` in front of it: one statement (a
    SELECT, INSERT, UPDATE or DELETE, or a non-recursive WITH) that names none of their tables."""
    return _STATEMENT.match(sql) is not None and not any(_names(sql, table) for table in {q.table for q in queued})


@lru_cache(maxsize=4096)
def _names(sql: str, table: str) -> bool:
    """Cached: the store's statements and tables are a small set, and a search compiled from the
    table's name on every call (``re``'s own cache lookup, then a scan of the whole statement)
    was ~4 % of a run's CPU one at a time on PostgreSQL."""
    return re.search(rf"\b{re.escape(table)}\b", sql) is not None


@lru_cache(maxsize=1024)
def _shifted(sql: str, by: int) -> str:
    """``sql`` with its parameters renumbered from ``by`` + 1. Cached: the store's statements and
    rows are a small set, their offsets too, and the substitution (a call per parameter) was
    ~90 % of building a combined statement (34 -> 3.4 us for a typical commit's)."""
    return _PARAMETER.sub(lambda m: f"${int(m.group(1)) + by}", sql) if by else sql


def combined(queued: Sequence[Queued], last: str | None = None, last_values: Sequence[Any] = ()
             ) -> tuple[str, list[Any]]:
    """One statement doing ``queued`` in order, then ``last`` (whose result it gives) or, without
    one, the last queued write; and its parameters, numbered through."""
    parts: list[str] = []
    values: list[Any] = []
    for item in queued:
        if isinstance(item, Update):
            parts.append(_shifted(item.sql, len(values)))
            values.extend(item.values)
            continue
        rows = []
        for row in item.rows:
            rows.append(_shifted(item.row, len(values)))
            values.extend(row)
        parts.append(f"{item.head} VALUES {', '.join(rows)}{item.tail}")
    if last is not None:
        final = _shifted(last, len(values))
        values.extend(last_values)
    else:
        final = parts.pop()
    if not parts:
        return final, values
    ctes = ", ".join(f"w{i} AS ({part})" for i, part in enumerate(parts))
    if final.startswith("WITH "):  # the last statement's own CTEs follow ours
        return f"WITH {ctes}, {final[5:]}", values
    return f"WITH {ctes} {final}", values
