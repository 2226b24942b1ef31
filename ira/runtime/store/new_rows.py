"""Inserts that keep the rows already there: ``INSERT .. ON CONFLICT DO NOTHING RETURNING``.

A duplicate inserts nothing and raises no database error, so the caller's transaction stays
usable without a savepoint (an error aborts the whole transaction on PostgreSQL, and each
savepoint is two more statements), and RETURNING tells which rows were new.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import Table
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncConnection
from sqlalchemy.sql import ColumnElement, Insert


class InsertNew:
    """The statement for ``table`` returning ``returning``, built once per dialect: building
    and keying a statement per call costs more CPU than SQLAlchemy's compiled cache saves."""

    def __init__(self, table: Table, *returning: ColumnElement[Any]) -> None:
        self._by_dialect: dict[str, Insert] = {
            name: dialect.insert(table).on_conflict_do_nothing().returning(*returning)
            for name, dialect in (("sqlite", sqlite), ("postgresql", postgresql))}

    def on(self, conn: AsyncConnection) -> Insert:
        """The statement in ``conn``'s dialect."""
        return self._by_dialect[conn.dialect.name]
