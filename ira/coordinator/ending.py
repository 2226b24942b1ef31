"""Ending a run early (cancel, rejection, expiry, failed join, exhausted budget).

One transaction: every unfinished step is skipped and its claim revoked (so a running
branch's heartbeat fails and its handler stops), open branch slices are settled, pending
approvals can no longer authorize anything, and Operations whose outcome is in doubt are
handed to reconciliation instead of being forgotten. A terminal run never runs again;
facts that arrive later are still recorded on their Operation.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from sqlalchemy.ext.asyncio import AsyncConnection

from ira.coordinator import operations, records
from ira.coordinator.config import WorkflowConfig
from ira.coordinator.workflow import BRANCH_KINDS
from ira.core.commit import EventDraft, RunCommit, StepChange
from ira.core.events import APPROVAL_SETTLED, RUN_ENDED, RunEventType
from ira.core.ids import new_id
from ira.core.run import Run
from ira.core.states import FINISHED_STEP_STATES, ApprovalState, OperationHandling, RunState, StepState
from ira.runtime.store import budget, runs, steps, timers

RECONCILE_TIMER = "operation_reconcile"
APPROVAL_EXPIRY_TIMER = "approval_expiry"


def expiry_timer_id(approval_id: str) -> str:
    return f"expiry:{approval_id}"


async def end_run(
    conn: AsyncConnection, run: Run, *, state: RunState, outcome: str, config: WorkflowConfig, at: datetime,
    detail: Mapping[str, Any] | None = None, step_states: Mapping[str, StepState] | None = None,
    events: Sequence[EventDraft] = (),
) -> Run:
    """Move ``run`` to a terminal ``state`` with ``outcome``; raises if someone moved it first."""
    changes = await _stop_steps(conn, run, step_states or {}, at=at)
    drafted = [*events]
    drafted += await invalidate_pending(conn, run, reason=outcome, at=at)
    drafted += await _reconcile_in_doubt(conn, run, at=at)
    await records.close_work_items(conn, run.tenant_id, run.run_id, kind="approval", at=at)
    drafted.append(EventDraft(type=RUN_ENDED[state], data={"outcome": outcome, **(detail or {})}))
    return await runs.commit(conn, RunCommit(
        tenant_id=run.tenant_id, run_id=run.run_id, expected_version=run.state_version, state=state,
        outcome=outcome, steps=tuple(changes), events=tuple(drafted)), at=at)


async def _stop_steps(
    conn: AsyncConnection, run: Run, overrides: Mapping[str, StepState], *, at: datetime,
) -> list[StepChange]:
    changes = []
    for step in await steps.list_steps(conn, run.tenant_id, run.run_id):
        if step.state in FINISHED_STEP_STATES:
            continue
        if step.owner is not None or step.state == StepState.RUNNING:
            await steps.revoke_claim(conn, run.tenant_id, run.run_id, step.step_id, now=at)
        if step.kind in BRANCH_KINDS:
            await budget.close_slice(conn, run.tenant_id, run.run_id, step.step_id, at=at)
        changes.append(StepChange(step_id=step.step_id, state=overrides.get(step.step_id, StepState.SKIPPED)))
    return changes


async def invalidate_pending(
    conn: AsyncConnection, run: Run, *, reason: str, at: datetime, state: ApprovalState = ApprovalState.INVALIDATED,
) -> list[EventDraft]:
    """Pending approvals of ``run`` can authorize nothing any more; their expiry is disarmed."""
    drafted = []
    for approval in await records.list_approvals(conn, run.tenant_id, run.run_id):
        if approval.state != ApprovalState.PENDING:
            continue
        if await records.settle_approval(conn, approval, state, at=at, reason=reason):
            await timers.cancel_timer(conn, run.tenant_id, expiry_timer_id(approval.approval_id), now=at)
            drafted.append(EventDraft(type=APPROVAL_SETTLED[state],
                                      data={"approval_id": approval.approval_id, "reason": reason}))
    return drafted


async def _reconcile_in_doubt(conn: AsyncConnection, run: Run, *, at: datetime) -> list[EventDraft]:
    """Bytes may have left for these: keep verifying them after the run ended."""
    drafted = []
    for op in await operations.in_doubt_for_run(conn, run.tenant_id, run.run_id):
        await operations.move(conn, op, handling=OperationHandling.RECONCILING, at=at)
        await timers.schedule_timer(conn, timers.Timer(
            tenant_id=run.tenant_id, timer_id=new_id("tmr"), kind=RECONCILE_TIMER, due_at=at, run_id=run.run_id,
            step_id=op.step_id, payload={"operation_id": op.operation_id}))
        drafted.append(EventDraft(type=RunEventType.OPERATION_RECONCILING, data={"operation_id": op.operation_id,
                                                                       "fact_state": op.fact_state.value}))
    return drafted
