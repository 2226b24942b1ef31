"""Every state machine of DESIGN.md §3: the enums, their transition tables, one check each.

Values serialize in lower case. A transition not in a table is a bug or a stale writer, never
something to "fix up": ``check_*`` raises :class:`IllegalTransitionError`.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum
from typing import TypeVar

from ira.core.errors import IllegalTransitionError


class RunState(StrEnum):
    PENDING = "pending"
    RUNNING = "running"
    WAITING = "waiting"  #: released its worker; wait_kind says for what
    PAUSED = "paused"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"


class IncidentStatus(StrEnum):
    """An incident as triage keeps it (decided in ``ira.triage.decide``)."""

    OPEN = "open"
    """At least one alert firing."""
    RESOLVED = "resolved"
    """Every alert resolved; still the group's incident until the quiet period passed."""
    CLOSED = "closed"


class WaitKind(StrEnum):
    APPROVAL = "approval"
    INPUT = "input"
    AUTH = "auth"
    HUMAN_REVIEW = "human_review"
    TIMER = "timer"
    EXTERNAL = "external"


class StepState(StrEnum):
    BLOCKED = "blocked"  #: waits for the steps it depends on
    READY = "ready"  #: claimable
    RUNNING = "running"  #: claimed; owner and lease are set
    WAITING = "waiting"  #: released its worker until a signal (approval, timer)
    DONE = "done"
    FAILED = "failed"
    SKIPPED = "skipped"


class OperationFact(StrEnum):
    INTENT_RECORDED = "intent_recorded"
    SUBMITTED = "submitted"  #: bytes may have left; the outcome must be confirmed or reconciled
    CONFIRMED_SUCCESS = "confirmed_success"
    CONFIRMED_FAILURE = "confirmed_failure"
    PARTIAL = "partial"
    UNKNOWN = "unknown"


class OperationHandling(StrEnum):
    NONE = "none"
    RECONCILING = "reconciling"
    MANUAL_REPAIR = "manual_repair"
    COMPENSATING = "compensating"


class ApprovalState(StrEnum):
    PENDING = "pending"
    APPROVED = "approved"
    REJECTED = "rejected"
    EXPIRED = "expired"
    INVALIDATED = "invalidated"  #: the draft or the resource changed after it was asked


class DeliveryState(StrEnum):
    PENDING = "pending"
    ACCEPTED = "accepted"  #: the channel took it; not proof that anyone saw it
    DELIVERED = "delivered"  #: only where the channel can prove it
    FAILED = "failed"
    UNKNOWN = "unknown"


class WorkItemState(StrEnum):
    OPEN = "open"
    CLOSED = "closed"


S = TypeVar("S", bound=StrEnum)

_RS = RunState
RUN_TRANSITIONS: Mapping[RunState, frozenset[RunState]] = {
    _RS.PENDING: frozenset({_RS.RUNNING, _RS.CANCELLED, _RS.FAILED}),
    _RS.RUNNING: frozenset({_RS.WAITING, _RS.PAUSED, _RS.COMPLETED, _RS.FAILED, _RS.CANCELLED}),
    _RS.WAITING: frozenset({_RS.RUNNING, _RS.FAILED, _RS.CANCELLED}),
    _RS.PAUSED: frozenset({_RS.RUNNING, _RS.CANCELLED}),
    _RS.COMPLETED: frozenset(),
    _RS.FAILED: frozenset(),
    _RS.CANCELLED: frozenset(),
}

_SS = StepState
STEP_TRANSITIONS: Mapping[StepState, frozenset[StepState]] = {
    _SS.BLOCKED: frozenset({_SS.READY, _SS.SKIPPED}),
    _SS.READY: frozenset({_SS.RUNNING, _SS.SKIPPED, _SS.FAILED}),
    # RUNNING -> READY is a release (the owner gives the step back without finishing it).
    _SS.RUNNING: frozenset({_SS.READY, _SS.WAITING, _SS.DONE, _SS.FAILED, _SS.SKIPPED}),
    # WAITING -> BLOCKED: a join waiting on a person goes back to wait for retried branches.
    # WAITING -> DONE: approve_ticket is finished by the approval it waited for, in the decision's
    # transaction under the run lock (the decision's judgement is its check; ira.coordinator.gate).
    _SS.WAITING: frozenset({_SS.READY, _SS.BLOCKED, _SS.DONE, _SS.FAILED, _SS.SKIPPED}),
    _SS.DONE: frozenset(),
    _SS.FAILED: frozenset(),
    _SS.SKIPPED: frozenset(),
}

_OF = OperationFact
OPERATION_TRANSITIONS: Mapping[OperationFact, frozenset[OperationFact]] = {
    _OF.INTENT_RECORDED: frozenset({_OF.SUBMITTED, _OF.CONFIRMED_FAILURE}),
    _OF.SUBMITTED: frozenset({_OF.CONFIRMED_SUCCESS, _OF.CONFIRMED_FAILURE, _OF.PARTIAL, _OF.UNKNOWN}),
    _OF.UNKNOWN: frozenset({_OF.CONFIRMED_SUCCESS, _OF.CONFIRMED_FAILURE, _OF.PARTIAL}),
    _OF.PARTIAL: frozenset({_OF.CONFIRMED_SUCCESS, _OF.CONFIRMED_FAILURE}),
    _OF.CONFIRMED_SUCCESS: frozenset(),
    _OF.CONFIRMED_FAILURE: frozenset(),
}

_OH = OperationHandling
HANDLING_TRANSITIONS: Mapping[OperationHandling, frozenset[OperationHandling]] = {
    _OH.NONE: frozenset({_OH.RECONCILING, _OH.MANUAL_REPAIR, _OH.COMPENSATING}),
    _OH.RECONCILING: frozenset({_OH.NONE, _OH.MANUAL_REPAIR, _OH.COMPENSATING}),
    _OH.MANUAL_REPAIR: frozenset({_OH.NONE, _OH.COMPENSATING}),
    _OH.COMPENSATING: frozenset({_OH.NONE, _OH.MANUAL_REPAIR}),
}

_AS = ApprovalState
APPROVAL_TRANSITIONS: Mapping[ApprovalState, frozenset[ApprovalState]] = {
    _AS.PENDING: frozenset({_AS.APPROVED, _AS.REJECTED, _AS.EXPIRED, _AS.INVALIDATED}),
    _AS.APPROVED: frozenset({_AS.INVALIDATED}),  # approved, then the draft changed before use
    _AS.REJECTED: frozenset(),
    _AS.EXPIRED: frozenset(),
    _AS.INVALIDATED: frozenset(),
}

_DS = DeliveryState
DELIVERY_TRANSITIONS: Mapping[DeliveryState, frozenset[DeliveryState]] = {
    _DS.PENDING: frozenset({_DS.ACCEPTED, _DS.DELIVERED, _DS.FAILED, _DS.UNKNOWN}),
    _DS.ACCEPTED: frozenset({_DS.DELIVERED, _DS.FAILED}),
    _DS.UNKNOWN: frozenset({_DS.ACCEPTED, _DS.DELIVERED, _DS.FAILED}),
    _DS.DELIVERED: frozenset(),
    _DS.FAILED: frozenset(),
}

WORK_ITEM_TRANSITIONS: Mapping[WorkItemState, frozenset[WorkItemState]] = {
    WorkItemState.OPEN: frozenset({WorkItemState.CLOSED}),
    WorkItemState.CLOSED: frozenset(),
}

TERMINAL_RUN_STATES = frozenset(s for s, nxt in RUN_TRANSITIONS.items() if not nxt)
FINISHED_STEP_STATES = frozenset(s for s, nxt in STEP_TRANSITIONS.items() if not nxt)


def _check(kind: str, table: Mapping[S, frozenset[S]], current: S, target: S) -> S:
    if target not in table[current]:
        raise IllegalTransitionError(kind, current.value, target.value)
    return target


def check_run_transition(current: RunState, target: RunState) -> RunState:
    """Return ``target`` if a run may move there from ``current``; raise otherwise."""
    return _check("run", RUN_TRANSITIONS, current, target)


def check_step_transition(current: StepState, target: StepState) -> StepState:
    """Return ``target`` if a step may move there from ``current``; raise otherwise."""
    return _check("step", STEP_TRANSITIONS, current, target)


def check_operation_transition(current: OperationFact, target: OperationFact) -> OperationFact:
    """Return ``target`` if an Operation's fact may move there; raise otherwise."""
    return _check("operation", OPERATION_TRANSITIONS, current, target)


def check_handling_transition(current: OperationHandling, target: OperationHandling) -> OperationHandling:
    """Return ``target`` if an Operation's handling state may move there; raise otherwise."""
    return _check("operation_handling", HANDLING_TRANSITIONS, current, target)


def check_approval_transition(current: ApprovalState, target: ApprovalState) -> ApprovalState:
    """Return ``target`` if an approval may move there; raise otherwise."""
    return _check("approval", APPROVAL_TRANSITIONS, current, target)


def check_delivery_transition(current: DeliveryState, target: DeliveryState) -> DeliveryState:
    """Return ``target`` if a delivery may move there; raise otherwise."""
    return _check("delivery", DELIVERY_TRANSITIONS, current, target)


def check_work_item_transition(current: WorkItemState, target: WorkItemState) -> WorkItemState:
    """Return ``target`` if a work item may move there; raise otherwise."""
    return _check("work_item", WORK_ITEM_TRANSITIONS, current, target)
