"""Incidents: what triage grouped, each alert with its labels, every evaluation with its reason
(``ignored: cooldown``, ``flapping``, ``silenced by ...``), the runs and the tickets.

Alerts are stored as they arrived (no redaction on the per-alert ingest path), so their free
text (title, labels, annotations) passes the redactor here, where it is shown."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import Field
from sqlalchemy import or_, select
from sqlalchemy.ext.asyncio import AsyncConnection

from ira.core.errors import NotFoundError
from ira.core.model import Model
from ira.core.redact import Redactor
from ira.core.replay import STAGING
from ira.core.states import IncidentStatus, OperationFact
from ira.readmodel.rows import view_of
from ira.readmodel.runs import RunSummary, list_runs
from ira.runtime.store.schema import decisions, operations, runs
from ira.triage.tables import alerts, incidents


class IncidentView(Model):
    """An incident as lists show it."""

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
    tickets: tuple[str, ...] = ()
    """Keys of the tickets filed for it (``INC-12``), oldest first."""


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


class IncidentDetail(IncidentView):
    """One incident with its alerts, the evaluations (with their basis), its runs and tickets."""

    alerts: list[AlertView] = Field(default_factory=list)
    evaluations: list[EvaluationView] = Field(default_factory=list)
    runs: list[RunSummary] = Field(default_factory=list)


_COLUMNS = [incidents.c[name] for name in IncidentView.model_fields if name != "tickets"]
_SHAPES = Redactor()
"""By shape: the read model knows no configured secret values."""


async def list_incidents(
    conn: AsyncConnection, tenant_id: str, *, status: IncidentStatus | None = None, limit: int = 50,
    environment: str | None = None,
) -> list[IncidentView]:
    """The tenant's incidents, newest first; staging's (replays) only when ``environment`` asks for them."""
    query = select(*_COLUMNS).where(incidents.c.tenant_id == tenant_id)
    env = incidents.c.environment
    query = query.where(env == environment if environment else or_(env.is_(None), env != STAGING))
    if status is not None:
        query = query.where(incidents.c.status == status)
    rows = (await conn.execute(query.order_by(incidents.c.opened_at.desc(), incidents.c.incident_id.desc())
                               .limit(limit))).all()
    keys = await _tickets(conn, tenant_id, [r.incident_id for r in rows])
    return [view_of(IncidentView, r, tickets=tuple(keys.get(r.incident_id, ())), **_shown(r)) for r in rows]


async def incident_detail(conn: AsyncConnection, tenant_id: str, incident_id: str) -> IncidentDetail:
    """NotFoundError when the tenant has no such incident (another tenant's looks the same)."""
    row = (await conn.execute(select(*_COLUMNS).where(
        incidents.c.tenant_id == tenant_id, incidents.c.incident_id == incident_id))).first()
    if row is None:
        raise NotFoundError(f"no incident {incident_id}")
    keys = await _tickets(conn, tenant_id, [incident_id])
    listed = await list_runs(conn, tenant_id, incident_id=incident_id, limit=100)
    return view_of(IncidentDetail, row, tickets=tuple(keys.get(incident_id, ())), **_shown(row),
                   alerts=await _alerts(conn, tenant_id, incident_id),
                   evaluations=await _evaluations(conn, tenant_id, incident_id),
                   runs=sorted(listed.runs, key=lambda r: r.created_at))


async def _alerts(conn: AsyncConnection, tenant_id: str, incident_id: str) -> list[AlertView]:
    rows = await conn.execute(
        select(alerts).where(alerts.c.tenant_id == tenant_id, alerts.c.incident_id == incident_id)
        .order_by(alerts.c.received_at, alerts.c.state_at, alerts.c.event_id))
    return [view_of(AlertView, row, labels=_SHAPES.value(row.payload.get("labels", {})),
                    annotations=_SHAPES.value(row.payload.get("annotations", {}))) for row in rows]


def _shown(row: Any) -> dict[str, Any]:
    """The incident's free text (its title is the first alert's summary) as it may be shown."""
    return {"title": _SHAPES.text(row.title), "labels": _SHAPES.value(dict(row.labels or {}))}


async def _evaluations(conn: AsyncConnection, tenant_id: str, incident_id: str) -> list[EvaluationView]:
    rows = await conn.execute(
        select(decisions).where(decisions.c.tenant_id == tenant_id, decisions.c.incident_id == incident_id))
    found = [view_of(EvaluationView, row) for row in rows]
    # the incident version orders evaluations made within one clock tick
    return sorted(found, key=lambda e: (e.at, e.basis.get("incident_version") or 0, e.evaluation_id))


async def _tickets(conn: AsyncConnection, tenant_id: str, incident_ids: list[str]) -> dict[str, list[str]]:
    """incident_id -> keys of the tickets its runs' Operations confirmed, in one read for a list
    (from the Operations, not the builtin ticket table, so Jira or GitHub keys show too)."""
    if not incident_ids:
        return {}
    rows = await conn.execute(
        select(runs.c.incident_id, operations.c.external_ref)
        .join(runs, (runs.c.tenant_id == operations.c.tenant_id) & (runs.c.run_id == operations.c.run_id))
        .where(operations.c.tenant_id == tenant_id, runs.c.incident_id.in_(incident_ids),
               operations.c.fact_state == OperationFact.CONFIRMED_SUCCESS, operations.c.external_ref.is_not(None))
        .order_by(operations.c.updated_at))
    found: dict[str, list[str]] = {}
    for r in rows:
        found.setdefault(r.incident_id, []).append(r.external_ref)
    return found
