"""SQL for the coordinator's records: approvals, work items, ticket drafts, deliveries.

Each function takes the caller's connection, so a decision, its run commit and its outbox
land in one transaction. Every query names the tenant.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from functools import cache
from typing import Any

from sqlalchemy import bindparam, func, insert, select, update
from sqlalchemy.ext.asyncio import AsyncConnection
from sqlalchemy.sql import Update

from ira.coordinator.schema import ticket_drafts
from ira.core.errors import NotFoundError
from ira.core.model import Model
from ira.core.operation import Approval, WorkItem
from ira.core.states import ApprovalState, WorkItemState
from ira.runtime.store.pg_fast import write_later
from ira.runtime.store.schema import approvals, deliveries, work_items

_ap, _wi, _dr = approvals.c, work_items.c, ticket_drafts.c

# The statements of the approval -> completed path, built once with bound parameters: building
# and cache-keying a statement per call cost more CPU than running it (see runtime/store/steps.py).
_GET_APPROVAL = select(approvals).where(_ap.tenant_id == bindparam("k_tenant"),
                                        _ap.approval_id == bindparam("k_approval"))
_LIST_APPROVALS = select(approvals).where(_ap.tenant_id == bindparam("k_tenant"), _ap.run_id == bindparam("k_run")) \
    .order_by(_ap.created_at, _ap.approval_id)
_CLOSE_WORK_ITEMS = update(work_items).where(
    _wi.tenant_id == bindparam("k_tenant"), _wi.run_id == bindparam("k_run"), _wi.kind == bindparam("k_kind"),
    _wi.state == WorkItemState.OPEN).values(state=WorkItemState.CLOSED, closed_at=bindparam("v_at"))
_CURRENT_DRAFT = select(ticket_drafts).where(_dr.tenant_id == bindparam("k_tenant"), _dr.run_id == bindparam("k_run")) \
    .order_by(_dr.version.desc()).limit(1)
_INSERT_DELIVERY = insert(deliveries)
_INSERT_APPROVAL, _INSERT_WORK_ITEM, _INSERT_DRAFT = insert(approvals), insert(work_items), insert(ticket_drafts)
_LATEST_VERSION = select(func.max(_dr.version)).where(_dr.tenant_id == bindparam("k_tenant"),
                                                      _dr.run_id == bindparam("k_run"))


class DraftRecord(Model):
    """One version of a run's ticket draft."""

    tenant_id: str
    run_id: str
    version: int
    ref: str
    incident_version: int
    reason: str
    created_at: datetime


async def insert_approval(conn: AsyncConnection, approval: Approval) -> None:
    await write_later(conn, _INSERT_APPROVAL, approval.model_dump())


async def get_approval(conn: AsyncConnection, tenant_id: str, approval_id: str) -> Approval:
    row = (await conn.execute(_GET_APPROVAL, {"k_tenant": tenant_id, "k_approval": approval_id})).first()
    if row is None:
        raise NotFoundError(f"approval {approval_id} not found")
    return Approval.model_validate(dict(row._mapping))


async def list_approvals(conn: AsyncConnection, tenant_id: str, run_id: str) -> list[Approval]:
    rows = await conn.execute(_LIST_APPROVALS, {"k_tenant": tenant_id, "k_run": run_id})
    return [Approval.model_validate(dict(r._mapping)) for r in rows]


async def settle_approval(
    conn: AsyncConnection, approval: Approval, state: ApprovalState, *, at: datetime,
    by: str | None = None, reason: str | None = None, from_states: Sequence[ApprovalState] = (ApprovalState.PENDING,),
) -> bool:
    """Compare-and-set the approval's state; False if it was no longer in ``from_states``."""
    result = await conn.execute(_settle_statement(tuple(from_states)), {
        "k_tenant": approval.tenant_id, "k_approval": approval.approval_id,
        "v_state": state, "v_by": by, "v_at": at, "v_reason": reason})
    return result.rowcount == 1


@cache
def _settle_statement(from_states: tuple[ApprovalState, ...]) -> Update:
    """``settle_approval``'s compare-and-set, built once per set of source states: as the statement's
    own ``IN`` list, not a parameter (a list the caller passes is compiled per execution on SQLite)."""
    return update(approvals).where(
        _ap.tenant_id == bindparam("k_tenant"), _ap.approval_id == bindparam("k_approval"),
        _ap.state.in_(from_states),
    ).values(state=bindparam("v_state"), decided_by=bindparam("v_by"), decided_at=bindparam("v_at"),
             reason=bindparam("v_reason"))


async def open_work_item(conn: AsyncConnection, item: WorkItem) -> None:
    await write_later(conn, _INSERT_WORK_ITEM, {**item.model_dump(), "closed_at": None})


async def close_work_items(
    conn: AsyncConnection, tenant_id: str, run_id: str, *, kind: str, at: datetime, facts: dict[str, Any] | None = None,
) -> None:
    """Close the run's open items of ``kind`` (an approval decided, a run ended). Nobody reads
    how many were open: without ``facts``, on PostgreSQL the UPDATE goes with the transaction's
    next statement (``write_later``)."""
    if facts is None:
        await write_later(conn, _CLOSE_WORK_ITEMS, {"k_tenant": tenant_id, "k_run": run_id, "k_kind": kind, "v_at": at})
        return
    await conn.execute(update(work_items).where(
        _wi.tenant_id == tenant_id, _wi.run_id == run_id, _wi.kind == kind, _wi.state == WorkItemState.OPEN,
    ).values(state=WorkItemState.CLOSED, closed_at=at, facts=facts))


async def list_work_items(conn: AsyncConnection, tenant_id: str, run_id: str) -> list[WorkItem]:
    rows = await conn.execute(select(work_items).where(_wi.tenant_id == tenant_id, _wi.run_id == run_id)
                              .order_by(_wi.created_at, _wi.work_item_id))
    return [WorkItem.model_validate({k: v for k, v in r._mapping.items() if k != "closed_at"}) for r in rows]


async def get_work_item(conn: AsyncConnection, tenant_id: str, work_item_id: str) -> dict[str, Any]:
    row = (await conn.execute(select(work_items).where(
        _wi.tenant_id == tenant_id, _wi.work_item_id == work_item_id))).first()
    if row is None:
        raise NotFoundError(f"work item {work_item_id} not found")
    return dict(row._mapping)


async def add_draft(
    conn: AsyncConnection, tenant_id: str, run_id: str, *, ref: str, incident_version: int, reason: str, at: datetime,
    latest: int | None = None,
) -> DraftRecord:
    """Record the next version of the run's draft (the primary key refuses a concurrent twin).
    ``latest``: the current draft's version as the caller read it in this transaction (0: none
    yet), so it is not read again."""
    if latest is None:
        latest = (await conn.execute(_LATEST_VERSION, {"k_tenant": tenant_id, "k_run": run_id})).scalar()
    record = DraftRecord(tenant_id=tenant_id, run_id=run_id, version=int(latest or 0) + 1, ref=ref,
                         incident_version=incident_version, reason=reason, created_at=at)
    await write_later(conn, _INSERT_DRAFT, record.model_dump())  # a twin's key error: with the next statement
    return record


async def current_draft(conn: AsyncConnection, tenant_id: str, run_id: str) -> DraftRecord | None:
    row = (await conn.execute(_CURRENT_DRAFT, {"k_tenant": tenant_id, "k_run": run_id})).first()
    return DraftRecord.model_validate(dict(row._mapping)) if row else None


async def list_drafts(conn: AsyncConnection, tenant_id: str, run_id: str) -> list[DraftRecord]:
    rows = await conn.execute(select(ticket_drafts).where(_dr.tenant_id == tenant_id, _dr.run_id == run_id)
                              .order_by(_dr.version))
    return [DraftRecord.model_validate(dict(r._mapping)) for r in rows]


async def insert_delivery(
    conn: AsyncConnection, *, tenant_id: str, notification_id: str, run_id: str, channel: str, payload_ref: str,
    at: datetime,
) -> None:
    await write_later(conn, _INSERT_DELIVERY, {
        "tenant_id": tenant_id, "notification_id": notification_id, "run_id": run_id, "channel": channel,
        "state": "pending", "attempts": 0, "payload_ref": payload_ref, "receipts": [], "created_at": at,
        "updated_at": at})


async def list_deliveries(conn: AsyncConnection, tenant_id: str, run_id: str) -> list[dict[str, Any]]:
    rows = await conn.execute(select(deliveries).where(deliveries.c.tenant_id == tenant_id,
                                                       deliveries.c.run_id == run_id)
                              .order_by(deliveries.c.created_at, deliveries.c.notification_id))
    return [dict(r._mapping) for r in rows]
