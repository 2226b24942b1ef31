"""Reading incidents for the API: every query takes the caller's tenant and filters by it."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import Field
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncConnection

from ira.core.errors import NotFoundError
from ira.core.model import Model
from ira.runtime.store.schema import decisions, runs
from ira.triage.decide import IncidentStatus
from ira.triage.tables import alerts, incidents


class IncidentView(Model):
    """An incident as the API lists it."""

    incident_id: str
    group_key: str
    status: IncidentStatus
    version: int
    title: str
    severity: str
    service: str | None
    environment: str | None
    labels: dict[str, str]
    firing_count: int
    opened_at: datetime
    updated_at: datetime
    quiet_until: datetime | None
    closed_at: datetime | None
    last_run_at: datetime | None


class AlertView(Model):
    event_id: str
    source_id: str
    source_event_id: str
    fingerprint: str
    status: str
    severity: str
    name: str
    state_at: datetime
    received_at: datetime
    labels: dict[str, str]
    annotations: dict[str, str]


class EvaluationView(Model):
    evaluation_id: str
    event_id: str
    decision: str
    reason: str
    basis: dict[str, Any]
    at: datetime


class RunView(Model):
    run_id: str
    state: str
    wait_kind: str | None
    workflow: str
    created_at: datetime
    updated_at: datetime


class IncidentDetail(IncidentView):
    """One incident with its alerts, the evaluations (with their basis) and its runs."""

    alerts: list[AlertView] = Field(default_factory=list)
    evaluations: list[EvaluationView] = Field(default_factory=list)
    runs: list[RunView] = Field(default_factory=list)


_INCIDENT_COLUMNS = [incidents.c[name] for name in IncidentView.model_fields]


async def list_incidents(
    conn: AsyncConnection, tenant_id: str, *, status: IncidentStatus | None = None, limit: int = 50
) -> list[IncidentView]:
    """The tenant's incidents, newest first."""
    query = select(*_INCIDENT_COLUMNS).where(incidents.c.tenant_id == tenant_id)
    if status is not None:
        query = query.where(incidents.c.status == status)
    rows = await conn.execute(query.order_by(incidents.c.opened_at.desc(), incidents.c.incident_id.desc())
                              .limit(limit))
    return [IncidentView.model_validate(dict(row._mapping)) for row in rows]


async def incident_detail(conn: AsyncConnection, tenant_id: str, incident_id: str) -> IncidentDetail:
    """NotFoundError when the tenant has no such incident (another tenant's looks the same)."""
    row = (await conn.execute(select(*_INCIDENT_COLUMNS).where(
        incidents.c.tenant_id == tenant_id, incidents.c.incident_id == incident_id))).first()
    if row is None:
        raise NotFoundError(f"no incident {incident_id}")
    return IncidentDetail(**dict(row._mapping), alerts=await _alerts(conn, tenant_id, incident_id),
                          evaluations=await _evaluations(conn, tenant_id, incident_id),
                          runs=await _runs(conn, tenant_id, incident_id))


async def _alerts(conn: AsyncConnection, tenant_id: str, incident_id: str) -> list[AlertView]:
    rows = await conn.execute(
        select(alerts).where(alerts.c.tenant_id == tenant_id, alerts.c.incident_id == incident_id)
        .order_by(alerts.c.received_at, alerts.c.state_at, alerts.c.event_id))
    return [AlertView(**{k: v for k, v in row._mapping.items() if k in AlertView.model_fields},
                      labels=row.payload.get("labels", {}), annotations=row.payload.get("annotations", {}))
            for row in rows]


async def _evaluations(conn: AsyncConnection, tenant_id: str, incident_id: str) -> list[EvaluationView]:
    rows = await conn.execute(
        select(decisions).where(decisions.c.tenant_id == tenant_id, decisions.c.incident_id == incident_id))
    found = [EvaluationView.model_validate({k: v for k, v in row._mapping.items() if k in EvaluationView.model_fields})
             for row in rows]
    # the incident version orders evaluations made within one clock tick
    return sorted(found, key=lambda e: (e.at, e.basis.get("incident_version") or 0, e.evaluation_id))


async def _runs(conn: AsyncConnection, tenant_id: str, incident_id: str) -> list[RunView]:
    rows = await conn.execute(
        select(runs.c.run_id, runs.c.state, runs.c.wait_kind, runs.c.workflow, runs.c.created_at, runs.c.updated_at)
        .where(runs.c.tenant_id == tenant_id, runs.c.incident_id == incident_id).order_by(runs.c.created_at))
    return [RunView.model_validate(dict(row._mapping)) for row in rows]
