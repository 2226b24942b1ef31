"""C6: the one way a run becomes COMPLETED.

:func:`verify_run` is the pure contract check (report present, evidence cited, every
required Operation CONFIRMED_SUCCESS, nothing required in doubt).
:func:`verify_and_complete` is the single entry point that acts on it, in the caller's
transaction: COMPLETED + result artifact + events + the notification's delivery outbox
together, fenced by the complete step's claim; or, if the check fails, a person's WorkItem
(an Operation in doubt) or FAILED with the checks that failed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import bindparam, select
from sqlalchemy.ext.asyncio import AsyncConnection

from ira.coordinator import operations, records
from ira.coordinator.config import WorkflowConfig
from ira.coordinator.ending import end_run
from ira.coordinator.facts import fence, load_model, lock_run, store_json
from ira.coordinator.notify import RUN_COMPLETED, request_notification
from ira.coordinator.reconcile import MANUAL_REPAIR, repair_facts
from ira.coordinator.report import canonical_json
from ira.coordinator.schema import ticket_drafts
from ira.coordinator.workflow import COMPLETE, SYNTHESIZE
from ira.core.commit import EventDraft, RunCommit, StepChange
from ira.core.events import RunEventType
from ira.core.ids import new_id
from ira.core.model import Model
from ira.core.operation import Operation, WorkItem
from ira.core.report import Report
from ira.core.run import Claim, Run
from ira.core.states import OperationFact, RunState, StepState, WaitKind, WorkItemState
from ira.runtime.store import runs
from ira.runtime.store.schema import steps as steps_table

AFTER_COMPLETE = "run.after_complete"
"""Fault point: C6 committed (run COMPLETED, delivery in the outbox), nothing delivered yet
(``handlers.complete``, or ``ticket.create_ticket`` where C6 went in the receipt's transaction)."""


class Check(Model):
    name: str
    passed: bool
    detail: str = ""


class Verification(Model):
    checks: tuple[Check, ...]
    in_doubt: tuple[str, ...] = ()
    """Required Operations whose outcome is unknown: a person must look, not a retry."""

    @property
    def passed(self) -> bool:
        return all(c.passed for c in self.checks)


class RunResult(Model):
    """The completed run's result artifact."""

    run_id: str
    incident_id: str | None
    report_ref: str
    draft_ref: str | None
    tickets: dict[str, str]
    missing_branches: tuple[str, ...]
    checks: tuple[Check, ...]


def verify_run(*, contract: Mapping[str, Any], report: Report | None, ops: Sequence[Operation]) -> Verification:
    facts = {f.evidence_ref for f in report.facts} if report else set()
    uncited = [h.statement for h in report.hypotheses if not set(h.evidence_refs) <= facts] if report else []
    # no evidence is acceptable only when the report says why (no source configured, branches
    # missing): a draft from the alert alone states its gaps instead of citing anything
    explained = bool(report and report.missing)
    checks = [Check(name="report_present", passed=report is not None),
              Check(name="evidence_cited", passed=(bool(facts) or explained) and not uncited,
                    detail="; ".join(uncited) or (f"{len(facts)} evidence refs" if facts else
                                                  "no evidence: every branch is stated missing"))]
    in_doubt = []
    for kind in contract.get("required_operations", ()):
        latest = [o for o in ops if o.kind == kind][-1:]
        confirmed = bool(latest) and latest[0].fact_state == OperationFact.CONFIRMED_SUCCESS \
            and latest[0].external_ref is not None
        checks.append(Check(name=f"operation_{kind}_confirmed", passed=confirmed,
                            detail=latest[0].fact_state.value if latest else "never attempted"))
        in_doubt += [o.operation_id for o in latest if o.fact_state in operations.IN_DOUBT]
    checks.append(Check(name="nothing_required_in_doubt", passed=not in_doubt, detail=", ".join(in_doubt)))
    return Verification(checks=tuple(checks), in_doubt=tuple(in_doubt))


async def verify_and_complete(conn: AsyncConnection, claim: Claim, *, config: WorkflowConfig, at: datetime,
                              run: Run | None = None) -> Run:
    """``run``: the run as the claim read it, where the store lets one writer in at a time (the
    commit's compare-and-set refuses it if it moved since); otherwise it is read under lock here."""
    if run is None:
        run = await lock_run(conn, claim.tenant_id, claim.run_id)
    completed, report, ops, verification = await _verified(conn, claim, run, config=config, at=at)
    if completed is not None:
        return completed
    if verification.in_doubt:
        return await _hand_over(conn, run, claim, ops=ops, verification=verification, at=at)
    outcome = "ticket_not_created" if report is not None else "verification_failed"
    return await end_run(conn, run, state=RunState.FAILED, outcome=outcome, config=config, at=at,
                         step_states={COMPLETE: StepState.FAILED},
                         detail={"failed_checks": [c.name for c in verification.checks if not c.passed]})


async def complete_if_verified(conn: AsyncConnection, claim: Claim, *, config: WorkflowConfig, at: datetime,
                               run: Run) -> Run | None:
    """C6 only where it passes: COMPLETED as :func:`verify_and_complete` commits it, or None and
    nothing written (the caller leaves the rest of the verdict to the ``complete`` step)."""
    return (await _verified(conn, claim, run, config=config, at=at))[0]


async def _verified(conn: AsyncConnection, claim: Claim, run: Run, *, config: WorkflowConfig, at: datetime
                    ) -> tuple[Run | None, Report | None, Sequence[Operation], Verification]:
    """The check, and the run COMPLETED (committed) if it passed, else None."""
    refs = (await conn.execute(_REFS, {"k_tenant": claim.tenant_id, "k_run": claim.run_id})).one()
    report = await load_model(conn, claim.tenant_id, refs.report_ref, model=Report)
    ops = await operations.list_operations(conn, claim.tenant_id, claim.run_id)
    verification = verify_run(contract=run.contract, report=report, ops=ops)
    if verification.passed and report is not None and refs.report_ref:
        return await _complete(conn, run, claim, report_ref=refs.report_ref, draft_ref=refs.draft_ref, report=report,
                               ops=ops, verification=verification, config=config, at=at), report, ops, verification
    return None, report, ops, verification


_REFS = select(
    select(steps_table.c.result_ref).where(
        steps_table.c.tenant_id == bindparam("k_tenant"), steps_table.c.run_id == bindparam("k_run"),
        steps_table.c.step_id == SYNTHESIZE).scalar_subquery().label("report_ref"),
    select(ticket_drafts.c.ref).where(
        ticket_drafts.c.tenant_id == bindparam("k_tenant"), ticket_drafts.c.run_id == bindparam("k_run"))
    .order_by(ticket_drafts.c.version.desc()).limit(1).scalar_subquery().label("draft_ref"))
"""What C6 records besides the Operations: the report (synthesize's result) and the current
draft's ref, one read (the run's lock is held: neither can change before the commit)."""


async def _complete(
    conn: AsyncConnection, run: Run, claim: Claim, *, report_ref: str, draft_ref: str | None, report: Report,
    ops: Sequence[Operation], verification: Verification, config: WorkflowConfig, at: datetime,
) -> Run:
    tickets = {o.kind: o.external_ref for o in ops
               if o.fact_state == OperationFact.CONFIRMED_SUCCESS and o.external_ref}
    result = RunResult(run_id=run.run_id, incident_id=run.incident_id, report_ref=report_ref,
                       draft_ref=draft_ref, tickets=tickets,
                       missing_branches=tuple(m.branch for m in report.missing), checks=verification.checks)
    ref = await store_json(conn, run.tenant_id, canonical_json(result), config=config, at=at)
    message = await request_notification(conn, run, kind=RUN_COMPLETED, config=config, at=at, data={
        "incident_id": run.incident_id, "tickets": tickets, "result_ref": ref.ref, "report_ref": report_ref,
        "title": report.title, "missing_branches": list(result.missing_branches)})
    return await runs.commit(conn, RunCommit(
        tenant_id=run.tenant_id, run_id=run.run_id, expected_version=run.state_version, fence=fence(claim),
        state=RunState.COMPLETED, outcome="ticket_created",
        steps=(StepChange(step_id=COMPLETE, state=StepState.DONE, result_ref=ref.ref),),
        events=(EventDraft(type=RunEventType.RUN_COMPLETED, data={"result_ref": ref.ref, "tickets": tickets}),),
        outbox=(message,)), at=at)


async def _hand_over(
    conn: AsyncConnection, run: Run, claim: Claim, *, ops: Sequence[Operation], verification: Verification,
    at: datetime,
) -> Run:
    """A required Operation is in doubt: completion is blocked; a person gets the facts."""
    for op in (o for o in ops if o.operation_id in verification.in_doubt):
        await records.open_work_item(conn, WorkItem(
            work_item_id=new_id("wi"), tenant_id=run.tenant_id, kind=MANUAL_REPAIR, run_id=run.run_id,
            state=WorkItemState.OPEN, created_at=at, facts=repair_facts(op, "ticket system"),
            summary=f"Cannot complete: {op.kind} {op.operation_id} is {op.fact_state.value}"))
    return await runs.commit(conn, RunCommit(
        tenant_id=run.tenant_id, run_id=run.run_id, expected_version=run.state_version, fence=fence(claim),
        state=RunState.WAITING, wait_kind=WaitKind.HUMAN_REVIEW,
        steps=(StepChange(step_id=COMPLETE, state=StepState.WAITING),),
        events=(EventDraft(type=RunEventType.VERIFICATION_BLOCKED,
            data={"in_doubt": list(verification.in_doubt)}),)), at=at)
