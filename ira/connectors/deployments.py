"""Change events recorded by triage (its ``changes`` table) as a ``ChangeSource``.

The table belongs to triage (migration ``0002_triage``); this module reads it through a
lightweight table clause so that it never adds the table to the shared metadata. Every query
is scoped by tenant, service and environment.
"""

from __future__ import annotations

from sqlalchemy import column, select, table
from sqlalchemy.exc import DBAPIError

from ira.core.errors import ConnectorUnavailableError
from ira.core.signals import READ_ONLY_RETRY, Change, ChangeQuery, ChangeResult, RetryContract
from ira.runtime.store.database import Database
from ira.runtime.store.schema import UtcDateTime

changes = table(
    "changes",
    column("tenant_id"), column("service"), column("environment"), column("version"), column("commit"),
    column("actor"), column("at", UtcDateTime()), column("url"), column("description"),
)


class SqlChangeSource:
    retry: RetryContract = READ_ONLY_RETRY

    def __init__(self, db: Database) -> None:
        self._db = db

    async def list_changes(self, query: ChangeQuery) -> ChangeResult:
        c = changes.c
        statement = (
            select(c.service, c.environment, c.version, c.commit, c.actor, c.at, c.url, c.description)
            .where(c.tenant_id == query.tenant_id, c.service == query.service, c.environment == query.environment,
                   c.at >= query.start, c.at <= query.end)
            .order_by(c.at.desc()).limit(query.limit + 1)
        )
        try:
            async with self._db.reader() as conn:
                rows = (await conn.execute(statement)).all()
        except DBAPIError as exc:  # no table yet (triage not migrated) or the database blinked
            raise ConnectorUnavailableError("deployments", type(exc.orig).__name__) from exc
        found = [Change(**row._mapping) for row in rows]
        return ChangeResult(query=query, changes=tuple(found[: query.limit]), partial=len(found) > query.limit)
