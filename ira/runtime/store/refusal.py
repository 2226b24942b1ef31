"""Whether the database refused a value itself (too long for its column, a NUL, out of range).

One predicate for both doors: the consumer runner dead-letters such a record at once (it is
refused on every try), and the HTTP edge answers 422 instead of a 500. SQLite stores what
PostgreSQL refuses, so only PostgreSQL's SQLSTATEs ever decide this in practice.
"""

from __future__ import annotations

from sqlalchemy.exc import DataError, DBAPIError

REFUSED_SQLSTATES = ("22", "23502", "23514")
"""PostgreSQL's data exceptions (class 22: too long, a NUL, out of range), NOT NULL and CHECK
violations. The asyncpg dialect raises most of them as a plain DBAPIError, not a DataError,
so the SQLSTATE decides. (A unique violation is left out: it can be a race between replicas.)"""


def sqlstate_of(exc: BaseException) -> str | None:
    state = getattr(getattr(exc, "orig", None), "sqlstate", None) if isinstance(exc, DBAPIError) else None
    return state if isinstance(state, str) else None


def is_refused_value(exc: BaseException) -> bool:
    """Whether the database refused a value itself: the same input is refused on every try."""
    if isinstance(exc, DataError):
        return True
    state = sqlstate_of(exc)
    return state is not None and state.startswith(REFUSED_SQLSTATES)
