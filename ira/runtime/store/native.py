"""Prebuilt statements run on the driver itself, under SQLAlchemy's execution machinery.

A durable step is a dozen small statements. Through SQLAlchemy each one paid ~250 µs of
Python on this machine (execution context, parameter and result processing) before the
database saw it, several times what SQLite or a PostgreSQL round trip costs. A
:class:`NativeStatement` is compiled by SQLAlchemy once per dialect (so the SQL, the parameter
order and the type conversions are exactly SQLAlchemy's) and then executed straight on the
connection's driver: SQLite's ``sqlite3`` connection (inline while the connection holds the
write lock, see :mod:`sqlite_driver`; one hop to aiosqlite's thread otherwise) or asyncpg
(whose statement cache prepares each statement once per connection).

It runs inside the caller's SQLAlchemy transaction, on the same connection: atomicity,
fencing and the outbox-in-the-same-transaction rule are unchanged. Driver errors are
translated to SQLAlchemy's exception classes, so callers and the retry classification see
the same errors as before.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy.engine import Dialect
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncConnection
from sqlalchemy.sql import ClauseElement

from ira.runtime.store import sqlite_driver

Processor = Callable[[Any], Any] | None


@dataclass(frozen=True)
class _Compiled:
    sql: str
    names: tuple[str, ...]
    """Bind names in the order the driver takes positional parameters."""
    defaults: Mapping[str, Any]
    """Values bound in the statement itself (literals); a caller's parameter of the same name wins."""
    binds: Mapping[str, Processor]
    columns: tuple[str, ...]
    results: tuple[Processor, ...]


class NativeStatement:
    """A statement built once, compiled once per dialect, executed on the driver."""

    def __init__(self, statement: ClauseElement) -> None:
        self.statement = statement
        self._compiled: dict[str, _Compiled] = {}

    def compiled(self, dialect: Dialect) -> _Compiled:
        found = self._compiled.get(dialect.name)
        if found is None:
            found = self._compiled[dialect.name] = _compile(self.statement, dialect)
        return found


def _compile(statement: Any, dialect: Dialect) -> _Compiled:
    compiled = statement.compile(dialect=dialect)
    names = tuple(compiled.positiontup or ())
    binds = {name: compiled.binds[name].type._cached_bind_processor(dialect) for name in names}
    defaults = {name: compiled.binds[name].effective_value for name in names
                if not compiled.binds[name].required}
    exported = list(getattr(statement, "exported_columns", ()) or ())
    return _Compiled(
        sql=compiled.string, names=names, defaults=defaults, binds=binds,
        columns=tuple(c.key for c in exported),
        results=tuple(c.type._cached_result_processor(dialect, None) for c in exported))


def _arguments(compiled: _Compiled, params: Mapping[str, Any]) -> tuple[Any, ...]:
    args = []
    for name in compiled.names:
        value = params[name] if name in params else compiled.defaults[name]
        process = compiled.binds[name]
        args.append(value if process is None else process(value))
    return tuple(args)


def _rows(compiled: _Compiled, raw: Sequence[Sequence[Any]]) -> list[dict[str, Any]]:
    out = []
    for values in raw:
        out.append({key: (value if process is None else process(value))
                    for key, process, value in zip(compiled.columns, compiled.results, values, strict=True)})
    return out


async def fetch(conn: AsyncConnection, statement: NativeStatement, params: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Execute once; the rows (of a SELECT or a RETURNING) as dicts keyed by column name."""
    compiled = statement.compiled(conn.dialect)
    args = _arguments(compiled, params)
    raw = await _execute(conn, compiled, args, many=False)
    return _rows(compiled, raw)


async def fetch_one(conn: AsyncConnection, statement: NativeStatement,
                    params: Mapping[str, Any]) -> dict[str, Any] | None:
    rows = await fetch(conn, statement, params)
    return rows[0] if rows else None


async def execute_many(conn: AsyncConnection, statement: NativeStatement,
                       params: Sequence[Mapping[str, Any]]) -> None:
    """One statement for many parameter sets (a batch of inserts), no rows back."""
    if not params:
        return
    compiled = statement.compiled(conn.dialect)
    await _execute(conn, compiled, [_arguments(compiled, p) for p in params], many=True)


async def _execute(conn: AsyncConnection, compiled: _Compiled, args: Any, *, many: bool) -> Sequence[Sequence[Any]]:
    adapted = (await conn.get_raw_connection()).dbapi_connection
    try:
        if conn.dialect.name == "sqlite":
            return await sqlite_driver.run_native(adapted, compiled.sql, args, many=many)  # type: ignore[arg-type]
        return await _run_asyncpg(adapted, compiled.sql, args, many=many)
    except DBAPIError:
        raise
    except Exception as exc:
        raise _translated(conn.dialect, adapted, compiled.sql, args, exc) from exc


async def _run_asyncpg(adapted: Any, sql: str, args: Any, *, many: bool) -> Sequence[Sequence[Any]]:
    """Within SQLAlchemy's asyncpg transaction (started here if no statement started it yet)."""
    async with adapted._execute_mutex:
        if adapted._transaction is None:
            await adapted._start_transaction()
        if many:
            await adapted._connection.executemany(sql, args)
            return []
        return await adapted._connection.fetch(sql, *args)  # type: ignore[no-any-return]


def _translated(dialect: Dialect, adapted: Any, sql: str, args: Any, exc: Exception) -> Exception:
    """The driver's exception as SQLAlchemy would have raised it (IntegrityError, OperationalError...)."""
    dbapi = dialect.loaded_dbapi
    if not isinstance(exc, dbapi.Error):
        try:  # asyncpg's own exceptions become the adapter's DBAPI classes here
            adapted._handle_exception(exc)
        except Exception as adapted_exc:  # noqa: BLE001  # _handle_exception always raises
            exc = adapted_exc
    if not isinstance(exc, dbapi.Error):
        return exc
    invalidated = dialect.is_disconnect(exc, adapted, None)
    return DBAPIError.instance(sql, args, exc, dbapi.Error, connection_invalidated=invalidated, dialect=dialect)
