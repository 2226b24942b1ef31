"""An approval as a person must see it, from the read model (``ira.readmodel``).

The draft is the very artifact the approval binds (by its content hash), the report is the
one it was written from, and the approval's state says what became of it: the Slack message
is rendered from these and re-rendered from them whenever the approval moves on.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncConnection

from ira.core.chat import ApprovalMessage, ApprovalOutcome, ApprovalStatus, Finding
from ira.core.errors import NotFoundError
from ira.core.states import ApprovalState, OperationFact
from ira.readmodel.detail import ApprovalView, RunDetail, run_detail
from ira.readmodel.reports import DraftView, ReportView, draft_view, report_view
from ira.runtime.store.schema import operations

SUPERSEDING = frozenset({"draft_changed", "resource_changed"})
"""Invalidation reasons that mean a newer draft replaced this one (refusal codes of the gate)."""


async def load_approval(
    conn: AsyncConnection, tenant_id: str, run_id: str, approval_id: str, *, run_url: str | None,
) -> tuple[ApprovalMessage, ApprovalView, RunDetail]:
    """The approval's message, the approval as it stands now, and its run."""
    detail = await run_detail(conn, tenant_id, run_id)
    approval = next((a for a in detail.approvals if a.approval_id == approval_id), None)
    if approval is None:
        raise NotFoundError(f"approval {approval_id} not found")
    version = next((d.version for d in detail.drafts if d.ref == approval.payload_hash), None)
    draft = await draft_view(conn, tenant_id, run_id, version=version)
    report = await report_view(conn, tenant_id, run_id)
    return approval_message(detail, report, draft, approval, run_url=run_url), approval, detail


def approval_message(detail: RunDetail, report: ReportView, draft: DraftView, approval: ApprovalView, *,
                     run_url: str | None) -> ApprovalMessage:
    return ApprovalMessage(
        run_id=detail.run_id, incident_id=report.incident_id,
        approval_id=approval.approval_id, title=report.title or detail.title or report.incident_id,
        severity=report.severity, service=report.service, environment=report.environment,
        opened_at=detail.created_at,
        facts=tuple(Finding(text=f.summary + (" (partial)" if f.partial else ""), source=f.source,
                            cites=(f.label or f.evidence_id,)) for f in report.facts),
        hypotheses=tuple(Finding(text=h.statement, confidence=h.confidence,
                                 cites=h.evidence_labels or h.evidence_ids) for h in report.hypotheses),
        missing=tuple(f"{m.branch}: {m.reason}" for m in report.missing),
        draft_title=draft.title, draft_body=draft.body, draft_version=draft.version, draft_hash=draft.ref,
        resource_version=approval.resource_version, approver_role=approval.required_role,
        expires_at=approval.expires_at, run_url=run_url)


async def ticket_url(conn: AsyncConnection, tenant_id: str, run_id: str) -> str | None:
    """The created ticket's address at its system (Jira, GitHub), for the message's link."""
    o = operations.c
    return (await conn.execute(select(o.external_url).where(
        o.tenant_id == tenant_id, o.run_id == run_id, o.fact_state == OperationFact.CONFIRMED_SUCCESS,
        o.external_url.is_not(None)).limit(1))).scalar()


def approval_status(approval: ApprovalView, *, now: datetime, ticket_key: str | None = None,
                    chat_users: Mapping[str, str] | None = None, ticket_url: str | None = None) -> ApprovalStatus:
    """What became of ``approval`` as of ``now`` (a pending one past its expiry is expired)."""
    if approval.state == ApprovalState.PENDING:
        if now < approval.expires_at:
            return ApprovalStatus(outcome=ApprovalOutcome.PENDING)
        return ApprovalStatus(outcome=ApprovalOutcome.EXPIRED, at=approval.expires_at)
    if approval.state == ApprovalState.INVALIDATED:
        outcome = ApprovalOutcome.SUPERSEDED if approval.reason in SUPERSEDING else ApprovalOutcome.ENDED
        return ApprovalStatus(outcome=outcome, reason=approval.reason, at=approval.decided_at)
    outcome = {ApprovalState.APPROVED: ApprovalOutcome.APPROVED, ApprovalState.REJECTED: ApprovalOutcome.REJECTED,
               ApprovalState.EXPIRED: ApprovalOutcome.EXPIRED}[approval.state]
    return ApprovalStatus(
        outcome=outcome, principal=approval.decided_by, chat_user=(chat_users or {}).get(approval.decided_by or ""),
        at=approval.decided_at, reason=approval.reason if outcome == ApprovalOutcome.REJECTED else None,
        ticket_key=ticket_key if outcome == ApprovalOutcome.APPROVED else None,
        ticket_url=ticket_url if outcome == ApprovalOutcome.APPROVED else None)
