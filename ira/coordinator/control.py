"""What people do to a run besides approving: cancel it, edit its draft, and after a failed
required branch either draft anyway or retry the failed branches."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy.ext.asyncio import AsyncConnection

from ira.coordinator import gate, records
from ira.coordinator.config import WorkflowConfig
from ira.coordinator.ending import end_run
from ira.coordinator.facts import lock_run
from ira.coordinator.workflow import BRANCH_DEADLINE_TIMER, JOIN, attempt_of, latest_attempts, retry_step_id
from ira.core.commit import EventDraft, NewStep, RunCommit, StepChange
from ira.core.errors import DomainError, IllegalTransitionError
from ira.core.events import RunEventType
from ira.core.operation import Approval
from ira.core.run import Run, Step
from ira.core.states import TERMINAL_RUN_STATES, RunState, StepState, WaitKind, WorkItemState
from ira.runtime.store import budget, runs, steps, timers
from ira.runtime.wakeup import step_wakeup

HUMAN_REVIEW = "human_review"


async def cancel_run(
    conn: AsyncConnection, tenant_id: str, run_id: str, *, principal: str, reason: str | None,
    config: WorkflowConfig, at: datetime,
) -> Run:
    """CANCELLED for good: no new claims, running branches revoked, approvals void, in-flight
    Operations kept under reconciliation. Cancelling a cancelled run is a no-op."""
    run = await lock_run(conn, tenant_id, run_id)
    if run.state == RunState.CANCELLED:
        return run
    if run.state in TERMINAL_RUN_STATES:
        raise IllegalTransitionError("run", run.state.value, RunState.CANCELLED.value)
    return await end_run(conn, run, state=RunState.CANCELLED, outcome="cancelled", config=config, at=at,
                         detail={"by": principal, "reason": reason})


async def draft_anyway(
    conn: AsyncConnection, tenant_id: str, work_item_id: str, *, principal: str, note: str | None,
    config: WorkflowConfig, at: datetime,
) -> Run:
    """A person reviewed a failed required branch and chose to draft anyway: the join runs
    again and proceeds, the failed branches reported missing in the report and the draft."""
    run, item = await _open_review(conn, tenant_id, work_item_id)
    await records.close_work_items(conn, tenant_id, run.run_id, kind=HUMAN_REVIEW, at=at, facts={
        **item["facts"], "decision": "draft_anyway", "decided_by": principal, "note": note})
    wakeup = step_wakeup(tenant_id, run.run_id, JOIN, kind=JOIN, environment=config.environment, at=at)
    return await runs.commit(conn, RunCommit(
        tenant_id=tenant_id, run_id=run.run_id, expected_version=run.state_version, state=RunState.RUNNING,
        steps=(StepChange(step_id=JOIN, state=StepState.READY),), outbox=(wakeup,),
        events=(EventDraft(type=RunEventType.REVIEW_DRAFT_ANYWAY, data={
            "work_item_id": work_item_id, "principal": principal, "note": note}),)), at=at)


async def retry_failed_branches(
    conn: AsyncConnection, tenant_id: str, work_item_id: str, *, principal: str, note: str | None,
    config: WorkflowConfig, at: datetime,
) -> Run:
    """A person reviewed a failed required branch and chose to try again (the source is back,
    a credential was fixed): each failed branch gets a new attempt (``metrics~2``) with a fresh
    slice and deadline, and the join goes back to waiting for them. The failed attempts stay in
    the plan as history; the join judges each branch by its latest attempt."""
    run, item = await _open_review(conn, tenant_id, work_item_id)
    plan = await steps.list_steps(conn, tenant_id, run.run_id)
    failed = [s for s in latest_attempts(plan) if s.state == StepState.FAILED]
    if not failed:
        raise DomainError(f"run {run.run_id} has no failed branch to retry")
    retries = tuple(_retry_of(s, config=config, at=at) for s in failed)
    join = next(s for s in plan if s.step_id == JOIN)
    for retry in retries:
        await budget.open_slice(conn, tenant_id, run.run_id, retry.step_id, config.branch_budget, at=at)
    await timers.schedule_timer(conn, timers.Timer(
        tenant_id=tenant_id, timer_id=f"deadline:{run.run_id}:{retries[0].step_id}", kind=BRANCH_DEADLINE_TIMER,
        due_at=at + config.branch_deadline, run_id=run.run_id))
    await records.close_work_items(conn, tenant_id, run.run_id, kind=HUMAN_REVIEW, at=at, facts={
        **item["facts"], "decision": "retry", "decided_by": principal, "note": note})
    wakeups = tuple(step_wakeup(tenant_id, run.run_id, r.step_id, kind=r.kind, environment=config.environment, at=at)
                    for r in retries)
    return await runs.commit(conn, RunCommit(
        tenant_id=tenant_id, run_id=run.run_id, expected_version=run.state_version, state=RunState.RUNNING,
        new_steps=retries, outbox=wakeups,
        steps=(StepChange(step_id=JOIN, state=StepState.BLOCKED,
                          depends_on=(*join.depends_on, *(r.step_id for r in retries))),),
        events=(EventDraft(type=RunEventType.REVIEW_RETRY_BRANCHES, data={
            "work_item_id": work_item_id, "principal": principal, "note": note,
            "steps": [r.step_id for r in retries], "retried": [s.step_id for s in failed]}),)), at=at)


async def _open_review(conn: AsyncConnection, tenant_id: str, work_item_id: str) -> tuple[Run, dict[str, Any]]:
    item = await records.get_work_item(conn, tenant_id, work_item_id)
    if item["kind"] != HUMAN_REVIEW or item["state"] != WorkItemState.OPEN or not item["run_id"]:
        raise DomainError(f"work item {work_item_id} is not an open review of a failed branch")
    run = await lock_run(conn, tenant_id, str(item["run_id"]))
    if (run.state, run.wait_kind) != (RunState.WAITING, WaitKind.HUMAN_REVIEW):
        raise DomainError(f"run {run.run_id} is not waiting for a review")
    return run, item


def _retry_of(step: Step, *, config: WorkflowConfig, at: datetime) -> NewStep:
    """The next attempt of a failed branch: same kind, scope and tools; a new deadline."""
    binding = {**step.binding, "deadline": (at + config.branch_deadline).isoformat(), "window_end": at.isoformat()}
    return NewStep(step_id=retry_step_id(step.kind, attempt_of(step.step_id) + 1), kind=step.kind,
                   state=StepState.READY, required=step.required, binding=binding)


async def edit_draft(
    conn: AsyncConnection, tenant_id: str, run_id: str, *, title: str | None, body: str | None, principal: str,
    config: WorkflowConfig, at: datetime,
) -> Approval:
    """A human edit is a new draft version; it needs (and gets) a new approval."""
    run = await lock_run(conn, tenant_id, run_id)
    edit = {k: v for k, v in (("title", title), ("body", body)) if v is not None}
    approval = await gate.revise(conn, run, reason="draft_changed", config=config, at=at, edit=edit,
                                 note=f"edited by {principal}")
    if approval is None:
        raise DomainError(f"run {run_id} is not waiting for approval of a draft")
    return approval
