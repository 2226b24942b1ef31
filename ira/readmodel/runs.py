"""Runs as lists show them: incident first (title, service, severity), then state and ticket."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncConnection

from ira.core.errors import NotFoundError
from ira.core.model import Model
from ira.core.replay import STAGING
from ira.core.states import OperationFact, RunState, WaitKind
from ira.readmodel.rows import view_of
from ira.runtime.store.schema import operations, runs


class RunSummary(Model):
    """One run in a list; the incident fields come from the run's bindings (as accepted)."""

    run_id: str
    incident_id: str | None
    title: str | None = None
    service: str | None = None
    severity: str | None = None
    state: RunState
    wait_kind: WaitKind | None
    outcome: str | None
    workflow: str
    environment: str
    state_version: int
    last_seq: int
    created_at: datetime
    updated_at: datetime
    ticket: str | None = None
    """The created ticket's key (``INC-12``) once the ticket Operation confirmed it."""


class RunList(Model):
    runs: tuple[RunSummary, ...]


def summary_of(row: Any, *, ticket: str | None) -> RunSummary:
    bindings = row.bindings or {}
    return view_of(RunSummary, row, title=bindings.get("title"), service=bindings.get("service"),
                   severity=bindings.get("severity"), ticket=ticket)


async def list_runs(
    conn: AsyncConnection, tenant_id: str, *, state: RunState | str | None = None,
    wait_kind: WaitKind | str | None = None, incident_id: str | None = None, limit: int = 50,
    environment: str | None = None,
) -> RunList:
    """The tenant's runs, newest first; staging runs (replays) only when ``environment`` asks for them."""
    query = select(runs).where(runs.c.tenant_id == tenant_id)
    query = query.where(runs.c.environment == environment if environment else runs.c.environment != STAGING)
    if state:
        query = query.where(runs.c.state == state)
    if wait_kind:
        query = query.where(runs.c.wait_kind == wait_kind)
    if incident_id:
        query = query.where(runs.c.incident_id == incident_id)
    rows = (await conn.execute(query.order_by(runs.c.created_at.desc(), runs.c.run_id.desc()).limit(limit))).all()
    tickets = await tickets_of_runs(conn, tenant_id, [r.run_id for r in rows])
    return RunList(runs=tuple(summary_of(r, ticket=tickets.get(r.run_id)) for r in rows))


async def get_summary(conn: AsyncConnection, tenant_id: str, run_id: str) -> RunSummary:
    """NotFoundError for a missing run and for another tenant's (they look the same)."""
    row = (await conn.execute(select(runs).where(runs.c.tenant_id == tenant_id, runs.c.run_id == run_id))).first()
    if row is None:
        raise NotFoundError(f"run {run_id} not found")
    return summary_of(row, ticket=(await tickets_of_runs(conn, tenant_id, [run_id])).get(run_id))


async def tickets_of_runs(conn: AsyncConnection, tenant_id: str, run_ids: Sequence[str]) -> dict[str, str]:
    """run_id -> the key of the ticket its Operation confirmed (one read for a whole list)."""
    if not run_ids:
        return {}
    rows = await conn.execute(select(operations.c.run_id, operations.c.external_ref).where(
        operations.c.tenant_id == tenant_id, operations.c.run_id.in_(list(run_ids)),
        operations.c.fact_state == OperationFact.CONFIRMED_SUCCESS, operations.c.external_ref.is_not(None)))
    return {r.run_id: r.external_ref for r in rows}
