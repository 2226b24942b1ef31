"""Read models of runs for the API and the dashboard (DESIGN.md §10 field names).

One place builds these shapes so ``GET /v1/runs/{id}`` and the run page can never disagree.
Every function takes the tenant and puts it in every WHERE clause.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncConnection

from ira.core.errors import NotFoundError
from ira.core.states import WorkItemState
from ira.runtime.store.schema import (
    approvals,
    budget_accounts,
    deliveries,
    operations,
    runs,
    steps,
    work_items,
)

RUN_FIELDS = ("run_id", "incident_id", "state", "wait_kind", "workflow", "environment", "outcome",
              "state_version", "last_seq", "created_at", "updated_at")


def _iso(row: Any, fields: tuple[str, ...]) -> dict[str, Any]:
    out = {}
    for name in fields:
        value = row._mapping[name]
        out[name] = value.isoformat() if hasattr(value, "isoformat") else value
    return out


async def list_runs(
    conn: AsyncConnection, tenant_id: str, *, state: str | None = None, wait_kind: str | None = None,
    limit: int = 50,
) -> list[dict[str, Any]]:
    """Newest first."""
    query = select(runs).where(runs.c.tenant_id == tenant_id)
    if state:
        query = query.where(runs.c.state == state)
    if wait_kind:
        query = query.where(runs.c.wait_kind == wait_kind)
    rows = await conn.execute(query.order_by(runs.c.created_at.desc(), runs.c.run_id.desc()).limit(limit))
    return [_iso(r, RUN_FIELDS) for r in rows]


async def run_detail(conn: AsyncConnection, tenant_id: str, run_id: str) -> dict[str, Any]:
    """The run with its steps, approvals, operations, budget and deliveries."""
    row = (await conn.execute(select(runs).where(runs.c.tenant_id == tenant_id, runs.c.run_id == run_id))).first()
    if row is None:
        raise NotFoundError(f"run {run_id} not found")
    detail = _iso(row, RUN_FIELDS)
    detail["steps"] = await _rows(conn, steps, tenant_id, run_id, (
        "step_id", "kind", "state", "depends_on", "required", "owner", "owner_epoch", "lease_until", "result_ref",
        "updated_at"), order=steps.c.step_id)
    detail["approvals"] = await _rows(conn, approvals, tenant_id, run_id, (
        "approval_id", "step_id", "action", "state", "expires_at", "payload_hash", "resource_version",
        "required_role", "decided_by", "decided_at", "reason"), order=approvals.c.created_at)
    detail["operations"] = await _rows(conn, operations, tenant_id, run_id, (
        "operation_id", "kind", "fact_state", "handling_state", "external_ref", "idempotency_key", "approval_id",
        "updated_at"), order=operations.c.created_at)
    detail["deliveries"] = await _rows(conn, deliveries, tenant_id, run_id, (
        "notification_id", "channel", "state", "attempts", "receipts", "updated_at"), order=deliveries.c.created_at)
    detail["budget"] = await budget_summary(conn, tenant_id, run_id)
    return detail


async def _rows(conn: AsyncConnection, table: Any, tenant_id: str, run_id: str, fields: tuple[str, ...],
                *, order: Any) -> list[dict[str, Any]]:
    result = await conn.execute(select(table).where(table.c.tenant_id == tenant_id, table.c.run_id == run_id)
                                .order_by(order))
    return [_iso(r, fields) for r in result]


async def budget_summary(conn: AsyncConnection, tenant_id: str, run_id: str) -> dict[str, dict[str, Any]]:
    """The root account per dimension, plus each branch slice under ``slices``."""
    result = await conn.execute(select(budget_accounts).where(
        budget_accounts.c.tenant_id == tenant_id, budget_accounts.c.run_id == run_id)
        .order_by(budget_accounts.c.scope, budget_accounts.c.dimension))
    summary: dict[str, dict[str, Any]] = {}
    for r in result:
        entry = {"limit": r.limit_amount, "reserved": r.reserved, "settled": r.settled}
        if r.scope == "root":
            summary.setdefault(r.dimension, {}).update(entry)
        else:
            summary.setdefault(r.dimension, {}).setdefault("slices", {})[r.scope] = entry
    return summary


async def open_work_items(conn: AsyncConnection, tenant_id: str, *, limit: int = 100) -> list[dict[str, Any]]:
    """What needs a person: approvals, manual repairs, blocked runs."""
    result = await conn.execute(select(work_items).where(
        work_items.c.tenant_id == tenant_id, work_items.c.state == WorkItemState.OPEN)
        .order_by(work_items.c.created_at.desc()).limit(limit))
    return [_iso(r, ("work_item_id", "kind", "run_id", "state", "summary", "facts", "created_at")) for r in result]
