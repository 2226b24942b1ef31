"""The run's report and ticket draft, read from their artifacts and shaped for a decision.

What an approver reads is parsed from the very artifact the approval binds (the draft's
content hash), so the page can never show one text and approve another.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncConnection

from ira.coordinator.schema import ticket_drafts
from ira.core.errors import NotFoundError
from ira.core.events import RunEventType
from ira.core.model import Model
from ira.core.report import MissingBranch, Report, ReportFact, ReportHypothesis, TicketDraft
from ira.readmodel.detail import ApprovalView
from ira.readmodel.evidence import EvidenceView, shape_evidence
from ira.readmodel.rows import view_of
from ira.readmodel.runs import get_summary
from ira.runtime.store import artifacts
from ira.runtime.store.schema import approvals, events

BRANCH_VERDICTS = (RunEventType.BRANCH_ACCEPTED, RunEventType.BRANCH_FAILED, RunEventType.BRANCH_MISSING,
                   RunEventType.BRANCH_NOT_PLANNED)
NOT_PLANNED = "not_planned"
"""The status of a branch whose data source is not configured (its event carries no status)."""


class FactView(ReportFact):
    evidence: EvidenceView | None = None
    """The cited artifact shaped for a glance; None when it is not a tool answer we know."""


class BranchView(Model):
    """How the join judged one branch: accepted, failed (required) or missing (optional)."""

    branch: str
    required: bool
    status: str
    reason: str
    partial: bool = False


class ReportView(Model):
    run_id: str
    ref: str
    incident_id: str
    title: str
    severity: str
    service: str | None
    environment: str | None
    facts: tuple[FactView, ...]
    hypotheses: tuple[ReportHypothesis, ...]
    missing: tuple[MissingBranch, ...]
    branches: tuple[BranchView, ...]
    notes: tuple[str, ...]


class DraftView(Model):
    """The ticket exactly as it will be filed, and the approval that binds it."""

    run_id: str
    version: int
    ref: str
    """The draft artifact's content hash: what an approval's ``payload_hash`` binds."""
    reason: str
    created_at: datetime
    incident_id: str
    incident_version: int
    title: str
    body: str
    """Markdown."""
    severity: str
    service: str | None
    labels: dict[str, str]
    report_ref: str
    approval: ApprovalView | None
    """The latest approval asked for this version, if any."""
    ticket: str | None
    versions: int
    """How many versions the draft has (a changed incident revises it)."""


async def draft_view(conn: AsyncConnection, tenant_id: str, run_id: str, *, version: int | None = None) -> DraftView:
    """The current draft (or ``version``); NotFoundError before synthesis or for another tenant."""
    summary = await get_summary(conn, tenant_id, run_id)
    rows = (await conn.execute(select(ticket_drafts).where(
        ticket_drafts.c.tenant_id == tenant_id, ticket_drafts.c.run_id == run_id)
        .order_by(ticket_drafts.c.version))).all()
    chosen = [r for r in rows if version is None or r.version == version]
    if not chosen:
        raise NotFoundError(f"run {run_id} has no ticket draft" + (f" version {version}" if version else " yet"))
    row = chosen[-1]
    draft = TicketDraft.model_validate_json((await artifacts.get_artifact(conn, tenant_id, row.ref))[1])
    request = draft.request
    return DraftView(
        run_id=run_id, version=row.version, ref=row.ref, reason=row.reason, created_at=row.created_at,
        incident_id=draft.incident_id, incident_version=draft.incident_version, title=request.title,
        body=request.body, severity=request.severity, service=request.service, labels=request.labels,
        report_ref=draft.report_ref, approval=await _approval(conn, tenant_id, run_id, row.ref),
        ticket=summary.ticket, versions=len(rows))


async def report_view(conn: AsyncConnection, tenant_id: str, run_id: str) -> ReportView:
    """The latest report with each fact's evidence; NotFoundError before synthesis."""
    await get_summary(conn, tenant_id, run_id)
    ref = await _latest_report_ref(conn, tenant_id, run_id)
    if ref is None:
        raise NotFoundError(f"run {run_id} has no report yet")
    report = Report.model_validate_json((await artifacts.get_artifact(conn, tenant_id, ref))[1])
    facts = [FactView(**f.model_dump(), evidence=await _evidence(conn, tenant_id, f)) for f in report.facts]
    return ReportView(
        run_id=run_id, ref=ref, incident_id=report.incident_id, title=report.title, severity=report.severity,
        service=report.service, environment=report.environment, facts=tuple(facts), hypotheses=report.hypotheses,
        missing=report.missing, branches=await branch_verdicts(conn, tenant_id, run_id), notes=report.notes)


async def branch_verdicts(conn: AsyncConnection, tenant_id: str, run_id: str) -> tuple[BranchView, ...]:
    """The join's latest judgement of each branch, from the run's log."""
    rows = await conn.execute(select(events.c.data).where(
        events.c.tenant_id == tenant_id, events.c.run_id == run_id, events.c.type.in_(BRANCH_VERDICTS))
        .order_by(events.c.run_seq))
    latest = {r.data.get("branch"): r.data for r in rows}
    return tuple(BranchView.model_validate({k: d.get(k) for k in ("branch", "required", "status", "reason")}
                                           | {"partial": bool(d.get("partial"))} | _not_planned(d))
                 for d in latest.values())


def _not_planned(data: dict[str, object]) -> dict[str, object]:
    """A BRANCH_NOT_PLANNED event has no status: the branch never ran, so nothing required it."""
    return {} if data.get("status") else {"status": NOT_PLANNED, "required": False}


async def _latest_report_ref(conn: AsyncConnection, tenant_id: str, run_id: str) -> str | None:
    row = (await conn.execute(select(events.c.data).where(
        events.c.tenant_id == tenant_id, events.c.run_id == run_id, events.c.type == RunEventType.REPORT_WRITTEN)
        .order_by(events.c.run_seq.desc()).limit(1))).first()
    return row.data.get("report_ref") if row else None


async def _evidence(conn: AsyncConnection, tenant_id: str, fact: ReportFact) -> EvidenceView | None:
    try:
        _, body = await artifacts.get_artifact(conn, tenant_id, fact.evidence_ref)
    except NotFoundError:
        return None
    return shape_evidence(fact.source, body)


async def _approval(conn: AsyncConnection, tenant_id: str, run_id: str, draft_ref: str) -> ApprovalView | None:
    row = (await conn.execute(select(approvals).where(
        approvals.c.tenant_id == tenant_id, approvals.c.run_id == run_id, approvals.c.payload_hash == draft_ref)
        .order_by(approvals.c.created_at.desc(), approvals.c.approval_id.desc()).limit(1))).first()
    return view_of(ApprovalView, row) if row else None
