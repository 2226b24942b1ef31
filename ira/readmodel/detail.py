"""One run in full: its plan, approvals, operations, budget, deliveries, work items, drafts."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncConnection

from ira.coordinator.schema import ticket_drafts
from ira.core.budget import ROOT_SCOPE
from ira.core.model import Model
from ira.core.states import ApprovalState, DeliveryState, OperationFact, OperationHandling, StepState
from ira.readmodel.rows import view_of
from ira.readmodel.runs import RunSummary, get_summary
from ira.runtime.runtrace import trace_id_of
from ira.runtime.store.schema import (
    approvals,
    attempts,
    budget_accounts,
    deliveries,
    operations,
    runs,
    steps,
    work_items,
)


class StepView(Model):
    step_id: str
    kind: str
    state: StepState
    depends_on: tuple[str, ...]
    required: bool
    owner: str | None
    owner_epoch: int
    lease_until: datetime | None
    result_ref: str | None
    updated_at: datetime
    binding: dict[str, Any]
    attempts: int = 0
    last_outcome: str | None = None
    """How the latest attempt ended (``done``, ``failed``, a stop reason), None while it runs."""
    last_error: str | None = None


class ApprovalView(Model):
    approval_id: str
    step_id: str
    action: str
    state: ApprovalState
    expires_at: datetime
    payload_hash: str
    resource_version: int
    required_role: str
    decided_by: str | None
    decided_at: datetime | None
    reason: str | None
    created_at: datetime


class OperationView(Model):
    operation_id: str
    step_id: str
    kind: str
    fact_state: OperationFact
    handling_state: OperationHandling
    external_ref: str | None
    idempotency_key: str
    approval_id: str | None
    created_at: datetime
    updated_at: datetime


NO_CHANNEL = "no channel configured"


class DeliveryView(Model):
    notification_id: str
    channel: str
    state: DeliveryState
    attempts: int
    receipts: list[dict[str, Any]]
    created_at: datetime
    updated_at: datetime
    status: str = ""
    """For people: the state, or ``not configured`` when no channel exists (nothing was sent,
    which a development setup should not read as a failure)."""
    reason: str | None = None
    """The latest receipt's reason or error, if it gave one."""


def delivery_view(row: Any) -> DeliveryView:
    last = (row.receipts or [{}])[-1].get("detail") or {}
    reason = last.get("reason") or last.get("error")
    status = "not configured" if reason == NO_CHANNEL else str(row.state)
    return view_of(DeliveryView, row, status=status, reason=reason)


class WorkItemView(Model):
    work_item_id: str
    kind: str
    run_id: str | None
    state: str
    summary: str
    facts: dict[str, Any]
    created_at: datetime
    closed_at: datetime | None


class DraftVersion(Model):
    version: int
    ref: str
    incident_version: int
    reason: str
    created_at: datetime


class BudgetLine(Model):
    """One dimension of one account (DESIGN.md §10: ``limit``, ``reserved``, ``settled``)."""

    limit: int
    reserved: int
    settled: int


class RunDetail(RunSummary):
    contract: dict[str, Any]
    bindings: dict[str, Any]
    steps: tuple[StepView, ...]
    approvals: tuple[ApprovalView, ...]
    operations: tuple[OperationView, ...]
    budget: dict[str, BudgetLine]
    """The root account per dimension."""
    budget_slices: dict[str, dict[str, BudgetLine]]
    """Each branch's slice (scope = step id) per dimension."""
    deliveries: tuple[DeliveryView, ...]
    work_items: tuple[WorkItemView, ...]
    drafts: tuple[DraftVersion, ...]
    trace_id: str | None = None
    """The trace of the work that started the run (its alert's), when one was recorded."""


async def run_detail(conn: AsyncConnection, tenant_id: str, run_id: str) -> RunDetail:
    """NotFoundError for a missing run and for another tenant's."""
    summary = await get_summary(conn, tenant_id, run_id)
    run = (await conn.execute(select(runs.c.contract, runs.c.bindings, runs.c.traceparent).where(
        runs.c.tenant_id == tenant_id, runs.c.run_id == run_id))).one()
    root, slices = await _budget(conn, tenant_id, run_id)
    return RunDetail(
        **summary.model_dump(), contract=run.contract or {}, bindings=run.bindings or {},
        steps=await _steps(conn, tenant_id, run_id),
        approvals=await _of(conn, ApprovalView, approvals, tenant_id, run_id, approvals.c.created_at),
        operations=await _of(conn, OperationView, operations, tenant_id, run_id, operations.c.created_at),
        budget=root, budget_slices=slices,
        deliveries=tuple(delivery_view(r) for r in await _rows(conn, deliveries, tenant_id, run_id,
                                                                   deliveries.c.created_at)),
        work_items=await _of(conn, WorkItemView, work_items, tenant_id, run_id, work_items.c.created_at),
        drafts=await _of(conn, DraftVersion, ticket_drafts, tenant_id, run_id, ticket_drafts.c.version),
        trace_id=trace_id_of(run.traceparent))


async def _rows(conn: AsyncConnection, table: Any, tenant_id: str, run_id: str, order: Any) -> list[Any]:
    return list(await conn.execute(select(table).where(table.c.tenant_id == tenant_id, table.c.run_id == run_id)
                                   .order_by(order)))


async def _of(
    conn: AsyncConnection, model: Any, table: Any, tenant_id: str, run_id: str, order: Any,
) -> tuple[Any, ...]:
    return tuple(view_of(model, r) for r in await _rows(conn, table, tenant_id, run_id, order))


async def _steps(conn: AsyncConnection, tenant_id: str, run_id: str) -> tuple[StepView, ...]:
    """Steps with their attempt count and how the latest attempt ended."""
    counts: dict[str, int] = {}
    latest: dict[str, Any] = {}
    for a in await conn.execute(select(attempts).where(attempts.c.tenant_id == tenant_id, attempts.c.run_id == run_id)
                                .order_by(attempts.c.started_at, attempts.c.attempt_id)):
        counts[a.step_id] = counts.get(a.step_id, 0) + 1
        latest[a.step_id] = a
    rows = await conn.execute(select(steps).where(steps.c.tenant_id == tenant_id, steps.c.run_id == run_id)
                              .order_by(steps.c.step_id))
    return tuple(view_of(StepView, r, binding=r.binding or {}, depends_on=tuple(r.depends_on or ()),
                         attempts=counts.get(r.step_id, 0),
                         last_outcome=getattr(latest.get(r.step_id), "outcome", None),
                         last_error=getattr(latest.get(r.step_id), "error", None)) for r in rows)


async def _budget(
    conn: AsyncConnection, tenant_id: str, run_id: str,
) -> tuple[dict[str, BudgetLine], dict[str, dict[str, BudgetLine]]]:
    rows = await conn.execute(select(budget_accounts).where(
        budget_accounts.c.tenant_id == tenant_id, budget_accounts.c.run_id == run_id)
        .order_by(budget_accounts.c.scope, budget_accounts.c.dimension))
    scopes: dict[str, dict[str, BudgetLine]] = {}
    for r in rows:
        scopes.setdefault(r.scope, {})[r.dimension] = BudgetLine(limit=r.limit_amount, reserved=r.reserved,
                                                                 settled=r.settled)
    return scopes.pop(ROOT_SCOPE, {}), scopes
