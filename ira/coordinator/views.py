"""The JSON shapes of the run API (DESIGN.md §10 field names), read tenant-scoped.

Kept apart from the routes so the dashboard and its SSE stream can reuse them.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncConnection

from ira.coordinator import operations, records
from ira.core.model import Model
from ira.core.run import Run, RunEvent
from ira.runtime.store import budget, runs, steps
from ira.runtime.store.rows import run_from_row
from ira.runtime.store.schema import budget_accounts
from ira.runtime.store.schema import runs as runs_table


class RunSummary(Model):
    run_id: str
    incident_id: str | None
    state: str
    wait_kind: str | None
    outcome: str | None
    workflow: str
    environment: str
    state_version: int
    last_seq: int
    created_at: datetime
    updated_at: datetime


class RunList(Model):
    runs: tuple[RunSummary, ...]


class Balance(Model):
    limit: int
    reserved: int
    settled: int


class RunDetail(RunSummary):
    contract: dict[str, Any]
    bindings: dict[str, Any]
    steps: tuple[dict[str, Any], ...]
    approvals: tuple[dict[str, Any], ...]
    operations: tuple[dict[str, Any], ...]
    budget: dict[str, Balance]
    budget_slices: dict[str, dict[str, Balance]]
    deliveries: tuple[dict[str, Any], ...]
    work_items: tuple[dict[str, Any], ...]
    drafts: tuple[dict[str, Any], ...]


class EventView(Model):
    run_seq: int
    event_id: str
    type: str
    at: datetime
    data: dict[str, Any]


class EventList(Model):
    events: tuple[EventView, ...]


def summary(run: Run) -> dict[str, Any]:
    return {"run_id": run.run_id, "incident_id": run.incident_id, "state": run.state.value,
            "wait_kind": run.wait_kind.value if run.wait_kind else None, "outcome": run.outcome,
            "workflow": run.workflow, "environment": run.environment, "state_version": run.state_version,
            "last_seq": run.last_seq, "created_at": run.created_at, "updated_at": run.updated_at}


async def list_runs(
    conn: AsyncConnection, tenant_id: str, *, state: str | None, wait_kind: str | None, limit: int,
) -> RunList:
    query = select(runs_table).where(runs_table.c.tenant_id == tenant_id)
    if state:
        query = query.where(runs_table.c.state == state)
    if wait_kind:
        query = query.where(runs_table.c.wait_kind == wait_kind)
    rows = await conn.execute(query.order_by(runs_table.c.created_at.desc(), runs_table.c.run_id.desc()).limit(limit))
    return RunList(runs=tuple(RunSummary(**summary(run_from_row(r))) for r in rows))


async def run_detail(conn: AsyncConnection, tenant_id: str, run_id: str) -> RunDetail:
    run = await runs.get_run(conn, tenant_id, run_id)
    plan = await steps.list_steps(conn, tenant_id, run_id)
    root, slices = await _budget(conn, tenant_id, run_id)
    return RunDetail(
        **summary(run), contract=run.contract, bindings=run.bindings,
        steps=tuple(s.model_dump(mode="json", exclude={"tenant_id", "run_id", "binding"}) | {"binding": s.binding}
                    for s in plan),
        approvals=tuple(a.model_dump(mode="json", exclude={"tenant_id"})
                        for a in await records.list_approvals(conn, tenant_id, run_id)),
        operations=tuple(o.model_dump(mode="json", exclude={"tenant_id"})
                         for o in await operations.list_operations(conn, tenant_id, run_id)),
        budget=root, budget_slices=slices,
        deliveries=tuple(_delivery(d) for d in await records.list_deliveries(conn, tenant_id, run_id)),
        work_items=tuple(w.model_dump(mode="json", exclude={"tenant_id"})
                         for w in await records.list_work_items(conn, tenant_id, run_id)),
        drafts=tuple(d.model_dump(mode="json", exclude={"tenant_id", "run_id"})
                     for d in await records.list_drafts(conn, tenant_id, run_id)))


async def _budget(conn: AsyncConnection, tenant_id: str, run_id: str) -> tuple[dict[str, Balance], dict[str, Any]]:
    scopes = (await conn.execute(select(budget_accounts.c.scope).distinct().where(
        budget_accounts.c.tenant_id == tenant_id, budget_accounts.c.run_id == run_id))).scalars().all()
    views: dict[str, dict[str, Balance]] = {}
    for scope in sorted(scopes):
        balances = await budget.list_balances(conn, tenant_id, run_id, scope=scope)
        views[scope] = {b.dimension.value: Balance(limit=b.limit, reserved=b.reserved, settled=b.settled)
                        for b in balances}
    return views.pop("root", {}), views


def _delivery(row: dict[str, Any]) -> dict[str, Any]:
    return {"notification_id": row["notification_id"], "channel": row["channel"], "state": row["state"],
            "attempts": row["attempts"], "receipts": row["receipts"], "created_at": row["created_at"].isoformat(),
            "updated_at": row["updated_at"].isoformat()}


def event_view(event: RunEvent) -> EventView:
    return EventView(run_seq=event.run_seq, event_id=event.event_id, type=event.type, at=event.at, data=event.data)
