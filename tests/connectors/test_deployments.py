"""Change events from triage's table, scoped by tenant, service, environment and window."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from sqlalchemy import insert

from ira.connectors.deployments import SqlChangeSource
from ira.core.ids import new_id
from ira.core.signals import ChangeQuery
from ira.runtime.store.database import Database
from ira.triage.tables import changes

T0 = datetime(2026, 4, 29, 2, 30, tzinfo=UTC)


async def add(db: Database, tenant: str, service: str, env: str, at: datetime, version: str) -> None:
    async with db.transaction() as conn:
        await conn.execute(insert(changes).values(
            tenant_id=tenant, event_id=new_id("chg"), source_id="changes", source_event_id=new_id("src"),
            service=service, environment=env, version=version, commit="abc1234", actor="ci", at=at,
            received_at=at))


async def test_changes_are_scoped_and_newest_first(db: Database) -> None:
    await add(db, "demo", "order-service", "prod", T0 + timedelta(minutes=2), "v3")
    await add(db, "demo", "order-service", "prod", T0 + timedelta(minutes=1), "v2.9")
    await add(db, "demo", "order-service", "prod", T0 - timedelta(hours=2), "v2.8")  # before the window
    await add(db, "demo", "order-service", "staging", T0 + timedelta(minutes=3), "v4")
    await add(db, "demo", "payment-service", "prod", T0 + timedelta(minutes=3), "v9")
    await add(db, "acme", "order-service", "prod", T0 + timedelta(minutes=3), "secret-v")
    query = ChangeQuery(tenant_id="demo", service="order-service", environment="prod", start=T0,
                        end=T0 + timedelta(minutes=30))
    result = await SqlChangeSource(db).list_changes(query)
    assert [c.version for c in result.changes] == ["v3", "v2.9"] and not result.partial
    assert result.changes[0].at == T0 + timedelta(minutes=2)
    cut = await SqlChangeSource(db).list_changes(query.model_copy(update={"limit": 1}))
    assert [c.version for c in cut.changes] == ["v3"] and cut.partial
