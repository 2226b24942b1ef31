"""The catalog of run event types: every entry a run's log can hold, in one place.

Code never spells an event type as a string: writers pick a member, readers (the dashboard,
the SSE stream, Slack messages, replay comparisons) match on members, and a typo is an
AttributeError at import instead of an event nobody renders. Values are the stored strings,
so the log written before the catalog existed reads back unchanged.
"""

from __future__ import annotations

from enum import StrEnum

from ira.core.states import ApprovalState, RunState


class RunEventType(StrEnum):
    # the run itself
    RUN_CREATED = "RUN_CREATED"
    RUN_STARTED = "RUN_STARTED"
    RUN_COMPLETED = "RUN_COMPLETED"
    RUN_FAILED = "RUN_FAILED"
    RUN_CANCELLED = "RUN_CANCELLED"
    DECISION_REFUSED = "DECISION_REFUSED"  #: a create_run decision for an incident that already has a run
    ALERT_DELIVERED = "ALERT_DELIVERED"  #: one follow-up alert delivered to the run (before coalesced updates)
    INCIDENT_UPDATED = "INCIDENT_UPDATED"  #: a coalesced incident update (follow-ups folded by triage)
    # steps and branches
    STEP_READY = "STEP_READY"
    STEP_FAILED = "STEP_FAILED"
    AGENT_TURN = "AGENT_TURN"
    PROPOSAL_DENIED = "PROPOSAL_DENIED"
    BRANCH_FINISHED = "BRANCH_FINISHED"
    BRANCH_TIMED_OUT = "BRANCH_TIMED_OUT"
    BRANCH_ACCEPTED = "BRANCH_ACCEPTED"
    BRANCH_FAILED = "BRANCH_FAILED"
    BRANCH_MISSING = "BRANCH_MISSING"
    BRANCH_NOT_PLANNED = "BRANCH_NOT_PLANNED"  #: its data source is not configured: a stated gap, no step
    JOINED = "JOINED"
    REVIEW_DRAFT_ANYWAY = "REVIEW_DRAFT_ANYWAY"  #: a person chose to draft without a failed required branch
    REVIEW_RETRY_BRANCHES = "REVIEW_RETRY_BRANCHES"  #: a person sent the failed branches to a new attempt
    # report, draft, approval
    REPORT_WRITTEN = "REPORT_WRITTEN"
    DRAFT_WRITTEN = "DRAFT_WRITTEN"
    DRAFT_REVISED = "DRAFT_REVISED"
    APPROVAL_NOT_REQUIRED = "APPROVAL_NOT_REQUIRED"
    APPROVAL_REQUESTED = "APPROVAL_REQUESTED"
    APPROVAL_CHECKED = "APPROVAL_CHECKED"
    APPROVAL_APPROVED = "APPROVAL_APPROVED"
    APPROVAL_REJECTED = "APPROVAL_REJECTED"
    APPROVAL_EXPIRED = "APPROVAL_EXPIRED"
    APPROVAL_INVALIDATED = "APPROVAL_INVALIDATED"
    APPROVAL_DECISION_REFUSED = "APPROVAL_DECISION_REFUSED"
    # the ticket Operation
    OPERATION_INTENT_RECORDED = "OPERATION_INTENT_RECORDED"
    OPERATION_SUBMITTED = "OPERATION_SUBMITTED"
    OPERATION_HELD = "OPERATION_HELD"
    OPERATION_REFUSED = "OPERATION_REFUSED"
    OPERATION_RETRY_AUTHORIZED = "OPERATION_RETRY_AUTHORIZED"
    OPERATION_FAILED = "OPERATION_FAILED"
    OPERATION_UNKNOWN = "OPERATION_UNKNOWN"
    OPERATION_NOT_CREATED = "OPERATION_NOT_CREATED"
    OPERATION_RESUMED = "OPERATION_RESUMED"
    OPERATION_RECONCILING = "OPERATION_RECONCILING"
    OPERATION_CONFIRMED = "OPERATION_CONFIRMED"
    OPERATION_MANUAL_REPAIR = "OPERATION_MANUAL_REPAIR"
    MANUAL_REPAIR_CLOSED = "MANUAL_REPAIR_CLOSED"
    TICKET_CREATED = "TICKET_CREATED"
    # verification
    VERIFICATION_BLOCKED = "VERIFICATION_BLOCKED"


RUN_ENDED: dict[RunState, RunEventType] = {
    RunState.COMPLETED: RunEventType.RUN_COMPLETED,
    RunState.FAILED: RunEventType.RUN_FAILED,
    RunState.CANCELLED: RunEventType.RUN_CANCELLED,
}
"""The event that records a run reaching each terminal state."""

APPROVAL_SETTLED: dict[ApprovalState, RunEventType] = {
    ApprovalState.APPROVED: RunEventType.APPROVAL_APPROVED,
    ApprovalState.REJECTED: RunEventType.APPROVAL_REJECTED,
    ApprovalState.EXPIRED: RunEventType.APPROVAL_EXPIRED,
    ApprovalState.INVALIDATED: RunEventType.APPROVAL_INVALIDATED,
}
"""The event that records an approval leaving ``pending`` for each state."""
