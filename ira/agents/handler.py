"""The branch step handler: read the binding, run the loop, commit the BranchResult.

The result is an artifact; the step moves to DONE (FAILED for a hard error) with that ref as
its ``result_ref``, in ONE fenced transaction that also appends ``BRANCH_FINISHED``, closes
the budget slice (the root is charged what the branch used) and records the attempt's usage.
The store promotes the join in the same commit.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from ira.agents.loop import BranchCancelledError, BranchLoop, LoopOutcome
from ira.agents.model import BranchTask, Conclusion
from ira.agents.policies import Policy
from ira.core.budget import BudgetDimension
from ira.core.clock import Clock
from ira.core.commit import EventDraft, Fence, RunCommit, StepChange
from ira.core.events import RunEventType
from ira.core.investigation import BranchBinding, BranchKind, BranchResult, StopReason
from ira.core.states import StepState
from ira.runtime.dispatch import StepContext
from ira.runtime.store import artifacts, budget, runs, steps
from ira.runtime.store.database import Database

log = logging.getLogger(__name__)

RESULT_MEDIA_TYPE = "application/vnd.ira.branch-result+json"
FINISHED_EVENT = RunEventType.BRANCH_FINISHED


class InvalidBindingError(Exception):
    pass


@dataclass(frozen=True)
class BranchHandler:
    """One per branch kind; ``loop_for`` builds the loop with that kind's policy."""

    kind: BranchKind
    db: Database
    clock: Clock
    loop_for: Callable[[BranchKind], BranchLoop]
    artifact_max_bytes: int = 1024 * 1024

    async def __call__(self, ctx: StepContext) -> None:
        try:
            task = self._task(ctx)
        except InvalidBindingError as exc:
            await self._finish(ctx, BranchResult(branch=self.kind, stop_reason=StopReason.ERROR, error=str(exc)), {})
            return
        loop = self.loop_for(self.kind)
        try:
            outcome = await loop.run(task, ctx.claim)
        except BranchCancelledError as exc:
            log.info("branch %s/%s stops: %s", ctx.claim.run_id, ctx.claim.step_id, exc)
            return
        result = build_result(outcome, loop.policy, task)
        await self._finish(ctx, result, _turn_usage(outcome))

    def _task(self, ctx: StepContext) -> BranchTask:
        try:
            binding = BranchBinding.model_validate(ctx.step.binding)
        except ValidationError as exc:
            raise InvalidBindingError(f"invalid binding: {exc.errors()[0]['msg']}") from exc
        if binding.tenant_id != ctx.claim.tenant_id:
            raise InvalidBindingError("the binding names another tenant")
        if binding.environment != ctx.run.environment:
            raise InvalidBindingError(f"the binding is for {binding.environment}, the run for {ctx.run.environment}")
        if binding.window_start >= binding.window_end:
            raise InvalidBindingError("the binding's window is empty")
        return BranchTask(kind=self.kind, binding=binding, run_id=ctx.claim.run_id, step_id=ctx.claim.step_id)

    async def _finish(self, ctx: StepContext, result: BranchResult, usage: dict[str, int]) -> None:
        """The branch's result, its step finished, its slice closed: one transaction.

        The result depends on nothing of the run, so the commit has no expected version: it
        applies on the run as its fence takes the run's row, after any writer holding it (the
        coordinator, a sibling branch finishing at the same moment), instead of reading the run
        first and losing the compare-and-set to whoever moved it meanwhile."""
        c, now = ctx.claim, self.clock.now()
        async with self.db.transaction() as conn:
            totals = {b.dimension: b.settled + b.reserved
                      for b in await budget.list_balances(conn, c.tenant_id, c.run_id, scope=c.step_id)}
            result = result.model_copy(update={"usage": totals})
            ref = await artifacts.put_artifact(conn, c.tenant_id, result.model_dump_json().encode(),
                                               media_type=RESULT_MEDIA_TYPE, max_bytes=self.artifact_max_bytes, at=now,
                                               read_back=False)
            failed = result.stop_reason is StopReason.ERROR
            await budget.close_slice_with_commit(conn, c.tenant_id, c.run_id, c.step_id, at=now)  # after the run's row
            await runs.commit(conn, RunCommit(
                tenant_id=c.tenant_id, run_id=c.run_id, expected_version=None,
                fence=Fence(step_id=c.step_id, owner_epoch=c.owner_epoch),
                steps=(StepChange(step_id=c.step_id, state=StepState.FAILED if failed else StepState.DONE,
                                  result_ref=ref.ref),),
                events=(EventDraft(type=FINISHED_EVENT, data=_finished(c.step_id, result, ref.ref)),),
            ), at=now)
            await steps.end_attempt(conn, c, outcome="failed" if failed else "done", now=now, error=result.error,
                                    usage=usage | {k.value: v for k, v in totals.items()})


NOT_CONFIGURED = "not_configured"


def build_result(outcome: LoopOutcome, policy: Policy, task: BranchTask) -> BranchResult:
    """Evidence from what was observed, whatever stopped the loop (partial evidence counts)."""
    conclusion = policy.conclude(task, outcome.turns)
    reason, error = outcome.stop_reason, outcome.error
    failures = sorted({t.observation.error_code for t in outcome.turns
                       if t.observation is not None and not t.observation.ok and t.observation.error_code})
    if reason in (StopReason.DONE, StopReason.NO_PROGRESS) and not conclusion.evidence and failures:
        reason, error = StopReason.ERROR, "no evidence; tool errors: " + ", ".join(failures)
    gap = None
    if not conclusion.evidence and failures == [NOT_CONFIGURED]:
        gap = f"no source is configured for {', '.join(task.binding.tools)}"
    return BranchResult(branch=task.kind, stop_reason=reason, evidence=conclusion.evidence,
                        hypotheses=_cited(conclusion), error=error, gap=gap)


def _cited(conclusion: Conclusion) -> tuple[Any, ...]:
    """Only hypotheses whose citations all exist: a hypothesis never cites thin air."""
    ids = {e.evidence_id for e in conclusion.evidence}
    return tuple(h for h in conclusion.hypotheses if h.evidence_ids and set(h.evidence_ids) <= ids)


def _turn_usage(outcome: LoopOutcome) -> dict[str, int]:
    calls = [t.model_call for t in outcome.turns if t.model_call is not None]
    return {"turns": len(outcome.turns), "input_tokens": sum(c.input_tokens for c in calls),
            "output_tokens": sum(c.output_tokens for c in calls)}


def _finished(step_id: str, result: BranchResult, ref: str) -> dict[str, Any]:
    return {"step_id": step_id, "branch": result.branch.value, "stop_reason": result.stop_reason.value,
            "result_ref": ref, "evidence": len(result.evidence), "hypotheses": len(result.hypotheses),
            "usage": {k.value if isinstance(k, BudgetDimension) else k: v for k, v in result.usage.items()},
            "error": result.error}
