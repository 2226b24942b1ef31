"""Durable timers, fired by the scanner as ``timer.fired`` on ``ira.steps.v1``.

Timers are rows, so they fire even if every worker that scheduled them died. Each handler
re-reads the state it acts on and does nothing if the world moved on (a decided approval,
a finished branch): a timer delivered twice acts once.
"""

from __future__ import annotations

import logging

from pydantic import ValidationError

from ira.coordinator import gate, reconcile
from ira.coordinator.deps import Deps
from ira.coordinator.ending import APPROVAL_EXPIRY_TIMER, RECONCILE_TIMER
from ira.coordinator.facts import lock_run, store_json
from ira.coordinator.report import canonical_json
from ira.coordinator.ticket import DEADLINE_TIMER
from ira.coordinator.workflow import BRANCH_DEADLINE_TIMER, BRANCH_KINDS
from ira.core.commit import EventDraft, RunCommit, StepChange
from ira.core.envelope import Envelope
from ira.core.errors import InvalidMessageError
from ira.core.events import RunEventType
from ira.core.investigation import BranchKind, BranchResult, StopReason
from ira.core.states import FINISHED_STEP_STATES, TERMINAL_RUN_STATES, StepState
from ira.runtime.store import budget, runs, steps
from ira.runtime.store.timers import Timer

log = logging.getLogger(__name__)


async def handle_timer(deps: Deps, envelope: Envelope) -> str:
    """Act on one fired timer; returns what it did (``ignored`` for other roles' timers)."""
    try:
        timer = Timer.model_validate(envelope.payload)
    except ValidationError as exc:
        raise InvalidMessageError(f"timer payload: {exc.errors()[0]['msg']}") from exc
    if timer.kind == BRANCH_DEADLINE_TIMER and timer.run_id:
        return await time_out_branches(deps, timer.tenant_id, timer.run_id)
    if timer.kind == APPROVAL_EXPIRY_TIMER:
        async with deps.db.transaction() as conn:
            expired = await gate.expire(conn, timer.tenant_id, str(timer.payload["approval_id"]), config=deps.config,
                                        at=deps.clock.now())
        return "expired" if expired else "decided"
    if timer.kind in (RECONCILE_TIMER, DEADLINE_TIMER):
        return await reconcile.reconcile(deps, timer.tenant_id, str(timer.payload["operation_id"]),
                                         final=timer.kind == DEADLINE_TIMER)
    return "ignored"


async def time_out_branches(deps: Deps, tenant_id: str, run_id: str) -> str:
    """Every branch still unfinished at its deadline ends FAILED: the join then treats a
    required one as failed and an optional one as missing. Its claim is revoked, so a late
    result from the old worker is refused by the fence."""
    now = deps.clock.now()
    async with deps.db.transaction() as conn:
        run = await lock_run(conn, tenant_id, run_id)
        late = [s for s in await steps.list_steps(conn, tenant_id, run_id)
                if s.kind in BRANCH_KINDS and s.state not in FINISHED_STEP_STATES]
        if run.state in TERMINAL_RUN_STATES or not late:
            return "nothing_late"
        changes, drafted = [], []
        for step in late:
            await steps.revoke_claim(conn, tenant_id, run_id, step.step_id, now=now)
            await budget.close_slice(conn, tenant_id, run_id, step.step_id, at=now)
            result = BranchResult(branch=BranchKind(step.kind), stop_reason=StopReason.DEADLINE,
                                  error="timed out by the coordinator at the branch deadline")
            ref = await store_json(conn, tenant_id, canonical_json(result), config=deps.config, at=now)
            changes.append(StepChange(step_id=step.step_id, state=StepState.FAILED, result_ref=ref.ref))
            drafted.append(EventDraft(type=RunEventType.BRANCH_TIMED_OUT, data={"step_id": step.step_id,
                                                                     "required": step.required}))
        await runs.commit(conn, RunCommit(tenant_id=tenant_id, run_id=run_id, expected_version=run.state_version,
                                          steps=tuple(changes), events=tuple(drafted)), at=now)
    return "timed_out"
