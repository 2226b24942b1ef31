"""Pure decisions of the join: which branch results count, and what the run does next.

The join reads the branches' authoritative state from SQL (step states and result
artifacts), never messages, so an early, duplicated or late message cannot change what it
decides: a step finishes once (the store refuses a second finish) and the join step itself
is claimed once per epoch.
"""

from __future__ import annotations

from collections.abc import Sequence
from enum import StrEnum

from ira.core.events import RunEventType
from ira.core.investigation import BranchResult, StopReason
from ira.core.model import Model
from ira.core.run import Step
from ira.core.states import StepState


class BranchStatus(StrEnum):
    ACCEPTED = "accepted"
    FAILED = "failed"  #: a required branch without accepted evidence
    MISSING = "missing"  #: an optional branch without accepted evidence: reported, not fatal


ASSESSED_EVENT: dict[BranchStatus, RunEventType] = {
    BranchStatus.ACCEPTED: RunEventType.BRANCH_ACCEPTED,
    BranchStatus.FAILED: RunEventType.BRANCH_FAILED,
    BranchStatus.MISSING: RunEventType.BRANCH_MISSING,
}
"""The event the join appends for each branch it assessed."""


class BranchOutcome(Model):
    step_id: str
    branch: str
    required: bool
    status: BranchStatus
    reason: str
    result_ref: str | None = None
    partial: bool = False


class JoinVerdict(StrEnum):
    PROCEED = "proceed"
    HUMAN_REVIEW = "human_review"
    FAIL = "fail"


def assess_branch(step: Step, result: BranchResult | None) -> BranchOutcome:
    """Accepted only if DONE with evidence, for this branch, from the branch's own tools."""
    reason = _rejection(step, result)
    status = BranchStatus.ACCEPTED if reason is None else (
        BranchStatus.FAILED if step.required and not (result and result.gap) else BranchStatus.MISSING)
    if result is not None and result.gap and reason is not None:
        reason = f"gap: {result.gap}"  # nothing to look at is said out loud, not treated as a failed look
    partial = result is not None and result.stop_reason != StopReason.DONE
    return BranchOutcome(step_id=step.step_id, branch=step.kind, required=step.required, status=status,
                         reason=reason or "accepted", result_ref=step.result_ref, partial=partial)


def _rejection(step: Step, result: BranchResult | None) -> str | None:
    if step.state != StepState.DONE:
        detail = (result.error or result.stop_reason.value) if result is not None else "no result"
        return f"{step.state.value}: {detail}"
    if result is None:
        return "done without a readable result"
    if result.branch.value != step.kind:
        return f"result is for the {result.branch.value} branch"
    if not result.evidence:
        return f"no evidence ({result.stop_reason.value})"
    allowed = set(step.binding.get("tools", ()))
    outside = sorted({e.source for e in result.evidence if e.source not in allowed})
    if outside:
        return f"evidence from tools outside the binding: {', '.join(outside)}"
    return None


DRAFT_ANYWAY = "draft_anyway"
"""The policy once a person reviewed the failure and chose to draft with the gaps stated."""


def decide_join(outcomes: Sequence[BranchOutcome], *, on_required_failure: str) -> JoinVerdict:
    """Proceed when every required branch is accepted; else ask a person or fail, per config
    (or proceed, the failed branches reported missing, when a person said ``draft_anyway``)."""
    if all(o.status != BranchStatus.FAILED for o in outcomes) or on_required_failure == DRAFT_ANYWAY:
        return JoinVerdict.PROCEED
    return JoinVerdict.FAIL if on_required_failure == "fail" else JoinVerdict.HUMAN_REVIEW
