"""External business actions and the approvals that authorize them (DESIGN.md §1 steps 6-8)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import Field

from ira.core.model import Model
from ira.core.states import ApprovalState, OperationFact, OperationHandling


class Operation(Model):
    """One external action (create a ticket): what we intend, what we know happened."""

    operation_id: str
    tenant_id: str
    run_id: str
    step_id: str
    kind: str
    idempotency_key: str
    payload_hash: str
    approval_id: str | None = None
    fact_state: OperationFact
    handling_state: OperationHandling = OperationHandling.NONE
    external_ref: str | None = None
    """The ticket's key in its system (``INC-12``, ``OPS-12``, ``#34``) once confirmed."""
    external_system: str | None = None
    """The system that holds it (``builtin``, ``jira``, ``github``)."""
    external_url: str | None = None
    """Where people open it (None for the builtin service)."""
    error: str | None = None
    """Why it failed: the ticket system's own message for a rejected create."""
    owner_epoch: int
    created_at: datetime
    updated_at: datetime


class Approval(Model):
    """A decision bound to the exact payload, resource version, role and expiry it was asked for."""

    approval_id: str
    tenant_id: str
    run_id: str
    step_id: str
    action: str
    payload_hash: str
    resource_version: int
    required_role: str
    state: ApprovalState
    expires_at: datetime
    decided_by: str | None = None
    decided_at: datetime | None = None
    reason: str | None = None
    created_at: datetime


class WorkItem(Model):
    """A job for a person: approve, repair an UNKNOWN operation, unblock a run."""

    work_item_id: str
    tenant_id: str
    kind: str
    run_id: str | None = None
    state: str
    summary: str
    facts: dict[str, Any] = Field(default_factory=dict)
    created_at: datetime
