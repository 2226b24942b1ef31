"""The loop's own records: decisions, observations and turns (what ``agent_turns`` persists).

A turn is one decision of the policy and, for a tool call, what came of it. Observations are
data with provenance (tool, origin, query, window, partial, error code + retryable, artifact
ref of the raw answer); they are never instructions.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Annotated, Any, Literal

from pydantic import Field

from ira.core.investigation import BranchBinding, BranchKind, Evidence, Hypothesis
from ira.core.model import Model

SPLIT_LEAD = timedelta(minutes=5)


class ToolProposal(Model):
    kind: Literal["tool"] = "tool"
    tool: str
    args: dict[str, Any] = Field(default_factory=dict)
    call_id: str | None = None
    rationale: str = ""


class HypothesisDraft(Model):
    """A policy's candidate explanation, citing the turns whose observations support it."""

    statement: str
    confidence: float = Field(ge=0, le=1)
    evidence_turns: tuple[int, ...] = ()
    evidence_refs: tuple[str, ...] = ()
    """Evidence ids (``logs-1-obs``) as the tool results name them; a model may cite either way."""
    unverified: tuple[str, ...] = ()


class Finish(Model):
    kind: Literal["finish"] = "finish"
    summary: str = ""
    hypotheses: tuple[HypothesisDraft, ...] = ()
    call_id: str | None = None


class Invalid(Model):
    """A decision that could not be used: malformed tool call, provider error. Becomes an error observation."""

    kind: Literal["invalid"] = "invalid"
    error_code: str
    message: str
    retryable: bool = False
    tool: str | None = None
    raw_arguments: str | None = None
    call_id: str | None = None


Decision = Annotated[ToolProposal | Finish | Invalid, Field(discriminator="kind")]


class ModelCall(Model):
    """The LLM call behind a decision: recorded on the turn, charged to the budget, traced."""

    provider: str
    model: str
    prompt_hash: str
    input_tokens: int
    output_tokens: int
    cost_micros: int = 0
    fingerprint: str | None = None
    """The request with what differs in a replay masked (``ira record`` keys model calls by it)."""
    reply: dict[str, Any] | None = None
    """The reply as read (redacted): what a replay of this run is answered with."""
    error: dict[str, Any] | None = None
    """How the provider failed the call (code, message redacted, retryable): no reply, and a replay
    of this run fails the same call the same way."""


class Observation(Model):
    tool: str
    ok: bool
    summary: str
    origin: str = "live"
    query: str | None = None
    window_start: datetime | None = None
    window_end: datetime | None = None
    partial: bool = False
    error_code: str | None = None
    error_message: str | None = None
    retryable: bool = False
    artifact_ref: str | None = None
    """The raw (redacted) answer, stored as an artifact."""
    data: dict[str, Any] = Field(default_factory=dict)
    attempts: int = 1

    def fingerprint_material(self) -> dict[str, Any]:
        """What counts as "the same observation" for no-progress detection."""
        return {"ok": self.ok, "code": self.error_code, "ref": self.artifact_ref, "summary": self.summary}


class Turn(Model):
    turn: int
    decision: Decision
    model_call: ModelCall | None = None
    observation: Observation | None = None


@dataclass(frozen=True)
class BranchTask:
    """What a policy investigates: the binding, plus where the baseline ends."""

    kind: BranchKind
    binding: BranchBinding
    run_id: str
    step_id: str

    @property
    def split_at(self) -> datetime:
        """Baseline before, incident after. Symptoms start before an alert fires (``for:``, rate
        windows), so the split is the alert's start minus a lead of min(5 min, window / 4);
        without a known start, the middle of the window."""
        b = self.binding
        span = b.window_end - b.window_start
        started = b.alert_started_at or _parsed(b.labels.get("alert_started_at") or b.labels.get("incident_start"))
        if started is not None:
            at = started - min(SPLIT_LEAD, span / 4)
            if b.window_start < at < b.window_end:
                return at
        return b.window_start + span / 2


def _parsed(raw: str | None) -> datetime | None:
    try:
        return datetime.fromisoformat(raw.replace("Z", "+00:00")) if raw else None
    except ValueError:
        return None


class Conclusion(Model):
    evidence: tuple[Evidence, ...] = ()
    hypotheses: tuple[Hypothesis, ...] = ()
