"""What one atomic state change consists of (the commit boundaries C1, C3-C6).

Domain code builds a :class:`RunCommit`; the store applies it in ONE transaction: compare-and-set
on the run's ``state_version``, fence on the step's ``owner_epoch``, step changes, events with
the next ``run_seq`` numbers, and outbox messages. If any check fails nothing is written.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field, model_validator

from ira.core.envelope import Envelope
from ira.core.events import RunEventType
from ira.core.model import Model
from ira.core.states import RunState, StepState, WaitKind


class EventDraft(Model):
    """An event to append; the store assigns ``run_seq``, ``event_id`` and ``at``."""

    type: RunEventType
    data: dict[str, Any] = Field(default_factory=dict)


class OutboxMessage(Model):
    """A message to publish once the transaction that wrote it has committed."""

    topic: str
    """The physical topic name (environment prefix already applied)."""
    key: str
    envelope: Envelope
    awaits: str | None = None
    """The consumer whose inbox must come to hold this message. Until it does, the scanner
    publishes it again (a broker may acknowledge and then forget); None: a hint nobody waits
    for (step wake-ups: the scanner re-discovers those from the steps themselves)."""
    urgent: bool = False
    """Taken first by its consumer (its per-key order kept): someone waits for what it starts."""


class Fence(Model):
    """The writer must still own this step at this epoch, or the commit is rejected."""

    step_id: str
    owner_epoch: int


class StepChange(Model):
    """Move one step of the run to a new state (checked against the step table)."""

    step_id: str
    state: StepState
    result_ref: str | None = None
    release_claim: bool = True
    """Clear owner and lease: a finished or waiting step holds no worker."""
    depends_on: tuple[str, ...] | None = None
    """New dependencies (a join sent back to wait for retried branches), or None to keep them."""


class NewStep(Model):
    """A step of a new run's plan."""

    step_id: str
    kind: str
    state: StepState
    depends_on: tuple[str, ...] = ()
    required: bool = True
    binding: dict[str, Any] = Field(default_factory=dict)


class RunCommit(Model):
    """One accepted change to a run: checks, then writes, all or nothing."""

    tenant_id: str
    run_id: str
    expected_version: int | None
    """The ``state_version`` the writer read; another value means someone else moved first.

    None: the commit was decided on nothing of the run but its own fenced step (a branch's
    result, a chain's no-op), so it applies on whatever version the run has when its fence
    takes the run's row, after any writer holding it: no read of the run before, and no
    refusal for a version that moved meanwhile. Needs a fence and a change of that step."""
    state: RunState | None = None
    """The run's new state, or None to keep it (the version still advances)."""
    wait_kind: WaitKind | None = None
    outcome: str | None = None
    fence: Fence | None = None
    steps: tuple[StepChange, ...] = ()
    events: tuple[EventDraft, ...] = ()
    outbox: tuple[OutboxMessage, ...] = ()
    new_steps: tuple[NewStep, ...] = ()
    """Steps added to the plan of a running run (a person's retry of failed branches)."""

    @model_validator(mode="after")
    def _unversioned_needs_its_fenced_step(self) -> RunCommit:
        if self.expected_version is None and (
                self.fence is None or all(s.step_id != self.fence.step_id for s in self.steps)):
            raise ValueError("a commit without an expected version needs a fence and a change of the fenced step")
        return self


class NewRun(Model):
    """Everything C1 creates in one transaction: task, run, steps, first event, outbox."""

    tenant_id: str
    run_id: str
    task_id: str
    task_kind: str
    subject_ref: str
    workflow: str
    environment: str = "prod"
    incident_id: str | None = None
    contract: dict[str, Any] = Field(default_factory=dict)
    bindings: dict[str, Any] = Field(default_factory=dict)
    steps: tuple[NewStep, ...] = ()
    events: tuple[EventDraft, ...] = (EventDraft(type=RunEventType.RUN_CREATED),)
    outbox: tuple[OutboxMessage, ...] = ()
    idempotency_key: str | None = None
    """A second NewRun with the same key returns the first run instead of creating another."""
    traceparent: str | None = None
    """The trace of the work that asked for the run (its alert's): the run's trace from now on."""
    state: RunState = RunState.PENDING
    """The state it is created in: RUNNING for a run whose plan starts at once (its first events
    say so), which saves the PENDING -> RUNNING commit that would follow in the same transaction."""
