"""The approval as a person must see it (``ApprovalMessage``), read from the stored artifacts.

Built when the approval is asked (and written into its notification, so the notifier posts
what was committed) and again when a decision re-renders the message: the draft the
approval binds (by its hash), the report that draft was written from, the incident as the
run was accepted for it.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime

from sqlalchemy.ext.asyncio import AsyncConnection

from ira.coordinator import operations, records
from ira.coordinator.approval import RefusalCode
from ira.coordinator.config import WorkflowConfig
from ira.coordinator.facts import load_model
from ira.coordinator.report import Report, TicketDraft
from ira.core.chat import ApprovalMessage, ApprovalOutcome, ApprovalStatus, Finding
from ira.core.operation import Approval
from ira.core.run import Run
from ira.core.states import ApprovalState, OperationFact
from ira.runtime.store import runs


async def approval_message(conn: AsyncConnection, run: Run, approval: Approval, *, draft_version: int,
                           config: WorkflowConfig) -> ApprovalMessage:
    """What the approver sees for ``approval``: its draft, the report behind it, the incident."""
    draft = await load_model(conn, run.tenant_id, approval.payload_hash, model=TicketDraft)
    report = await load_model(conn, run.tenant_id, draft.report_ref if draft else None, model=Report)
    b = run.bindings
    return ApprovalMessage(
        tenant_id=run.tenant_id, run_id=run.run_id, incident_id=run.incident_id, approval_id=approval.approval_id,
        title=str(b.get("title") or run.incident_id), severity=str(b.get("severity") or "warning"),
        service=b.get("service"), environment=b.get("environment"), opened_at=_opened(b.get("alert_started_at")),
        facts=_facts(report), hypotheses=_hypotheses(report),
        missing=tuple(f"{m.branch}: {m.reason}" for m in report.missing) if report else (),
        draft_title=draft.request.title if draft else "(draft unreadable)",
        draft_body=draft.request.body if draft else "", draft_version=draft_version,
        draft_hash=approval.payload_hash, resource_version=approval.resource_version,
        approver_role=approval.required_role, expires_at=approval.expires_at, run_url=config.run_url(run.run_id))


def _facts(report: Report | None) -> tuple[Finding, ...]:
    if report is None:
        return ()
    return tuple(Finding(text=f.summary + (" (partial)" if f.partial else ""), source=f.source,
                         cites=(f.evidence_id,)) for f in report.facts)


def _hypotheses(report: Report | None) -> tuple[Finding, ...]:
    if report is None:
        return ()
    return tuple(Finding(text=h.statement, confidence=h.confidence, cites=h.evidence_ids) for h in report.hypotheses)


def _opened(value: object) -> datetime | None:
    return datetime.fromisoformat(value) if isinstance(value, str) and value else None


_SUPERSEDING = frozenset({RefusalCode.DRAFT_CHANGED.value, RefusalCode.RESOURCE_CHANGED.value})


def approval_status(approval: Approval, *, now: datetime, ticket_key: str | None = None,
                    chat_users: Mapping[str, str] | None = None) -> ApprovalStatus:
    """What became of ``approval`` as of ``now`` (a pending one past its expiry is expired)."""
    chat_user = (chat_users or {}).get(approval.decided_by or "")
    state = approval.state
    if state == ApprovalState.PENDING:
        outcome = ApprovalOutcome.EXPIRED if now >= approval.expires_at else ApprovalOutcome.PENDING
        return ApprovalStatus(outcome=outcome, at=approval.expires_at if outcome == ApprovalOutcome.EXPIRED else None)
    if state == ApprovalState.INVALIDATED:
        outcome = ApprovalOutcome.SUPERSEDED if approval.reason in _SUPERSEDING else ApprovalOutcome.ENDED
        return ApprovalStatus(outcome=outcome, reason=approval.reason, at=approval.decided_at)
    outcome = {ApprovalState.APPROVED: ApprovalOutcome.APPROVED, ApprovalState.REJECTED: ApprovalOutcome.REJECTED,
               ApprovalState.EXPIRED: ApprovalOutcome.EXPIRED}[state]
    return ApprovalStatus(outcome=outcome, principal=approval.decided_by, chat_user=chat_user,
                          at=approval.decided_at, reason=approval.reason, ticket_key=ticket_key)


async def approval_view(conn: AsyncConnection, tenant_id: str, approval_id: str, *,
                        config: WorkflowConfig) -> tuple[Approval, ApprovalMessage, str | None]:
    """The approval, its message and the key of the ticket created under it (if any yet)."""
    approval = await records.get_approval(conn, tenant_id, approval_id)
    run = await runs.get_run(conn, tenant_id, approval.run_id)
    versions = {d.ref: d.version for d in await records.list_drafts(conn, tenant_id, run.run_id)}
    message = await approval_message(conn, run, approval, draft_version=versions.get(approval.payload_hash, 0),
                                     config=config)
    confirmed = [o.external_ref for o in await operations.list_operations(conn, tenant_id, run.run_id)
                 if o.fact_state == OperationFact.CONFIRMED_SUCCESS and o.external_ref]
    ticket = confirmed[-1] if confirmed and approval.state == ApprovalState.APPROVED else None
    return approval, message, ticket
