"""Tasks, runs, steps, attempts and the run's event log (DESIGN.md §3)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import Field

from ira.core.events import RunEventType
from ira.core.model import Model
from ira.core.states import RunState, StepState, WaitKind


class Task(Model):
    """The goal: diagnose this incident, draft a ticket."""

    task_id: str
    tenant_id: str
    kind: str
    subject_ref: str
    """What the task is about, e.g. ``incident:inc_...``."""
    created_at: datetime


class Run(Model):
    """One execution of a task: state, version, contract and bindings."""

    run_id: str
    tenant_id: str
    task_id: str
    workflow: str
    """Workflow name and version, e.g. ``incident-diagnosis@1``."""
    state: RunState
    wait_kind: WaitKind | None = None
    state_version: int
    """Compare-and-set counter: every accepted state change bumps it by one."""
    last_seq: int
    """The highest run_seq in the run's event log."""
    environment: str = "prod"
    contract: dict[str, Any] = Field(default_factory=dict)
    bindings: dict[str, Any] = Field(default_factory=dict)
    incident_id: str | None = None
    outcome: str | None = None
    created_at: datetime
    updated_at: datetime
    traceparent: str | None = None
    """W3C trace context of the work that started the run; all later work continues its trace."""


class Step(Model):
    """A node of the run's plan, with its current owner and lease."""

    tenant_id: str
    run_id: str
    step_id: str
    kind: str
    state: StepState
    depends_on: tuple[str, ...] = ()
    required: bool = True
    owner: str | None = None
    owner_epoch: int = 0
    """Fencing token: +1 on every claim; writes carrying a lower epoch are rejected."""
    lease_until: datetime | None = None
    binding: dict[str, Any] = Field(default_factory=dict)
    result_ref: str | None = None
    updated_at: datetime


class Claim(Model):
    """Proof of ownership of a step: every commit and connector write carries it."""

    tenant_id: str
    run_id: str
    step_id: str
    owner: str
    owner_epoch: int
    lease_until: datetime
    attempt_id: str


class Attempt(Model):
    """One try of a step: who, when, with what usage and error."""

    attempt_id: str
    tenant_id: str
    run_id: str
    step_id: str
    owner_epoch: int
    started_at: datetime
    ended_at: datetime | None = None
    outcome: str | None = None
    error: str | None = None
    usage: dict[str, int] = Field(default_factory=dict)


class RunEvent(Model):
    """An accepted change, numbered 1..N without gaps per run."""

    tenant_id: str
    run_id: str
    run_seq: int
    event_id: str
    type: RunEventType
    at: datetime
    data: dict[str, Any] = Field(default_factory=dict)
