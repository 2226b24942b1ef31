"""The contract between the coordinator and the investigators (``agents/``).

The coordinator puts a :class:`BranchBinding` on each branch step (``steps.binding``): the
only tools, scope and budget the branch may use. The agent finishes the step with a
:class:`BranchResult` stored as a JSON artifact whose ref is the step's ``result_ref``.
"""

from __future__ import annotations

from enum import StrEnum

from pydantic import AwareDatetime, Field

from ira.core.budget import BudgetDimension
from ira.core.model import Model


class BranchKind(StrEnum):
    METRICS = "metrics"
    LOGS = "logs"
    RUNBOOKS = "runbooks"


class BranchBinding(Model):
    """A narrowed grant: this tenant, environment, service and window, these tools, this budget."""

    tenant_id: str
    environment: str
    service: str | None
    incident_id: str
    alert_name: str
    window_start: AwareDatetime
    window_end: AwareDatetime
    tools: tuple[str, ...]
    """The only tool names this branch may call."""
    budget: dict[BudgetDimension, int]
    """The slice reserved for this branch from the run's root budget (scope = step id)."""
    deadline: AwareDatetime
    may_delegate: bool = False
    labels: dict[str, str] = Field(default_factory=dict)
    alert_started_at: AwareDatetime | None = None
    """When the alert started: the baseline ends shortly before it."""
    annotations: dict[str, str] = Field(default_factory=dict)
    """The alert's summary, description, runbook_url...: symptom text for runbook search (data, never orders)."""
    runbook_url: str | None = None
    changes_since: AwareDatetime | None = None
    """How far back deploys and config changes may be listed (before ``window_start``: a change hours
    earlier can explain an incident now)."""
    dependencies: tuple[str, ...] = ()
    """Declared dependencies of ``service`` (configuration or the alert's ``depends_on``): metric queries
    may also select these services, nothing else."""

    @property
    def services(self) -> tuple[str, ...]:
        """Every service this binding may read: its own, then its declared dependencies."""
        return tuple(s for s in (self.service, *self.dependencies) if s)


class StopReason(StrEnum):
    DONE = "done"
    BUDGET_EXHAUSTED = "budget_exhausted"
    DEADLINE = "deadline"
    NO_PROGRESS = "no_progress"
    DENIED = "denied"
    ERROR = "error"


class Evidence(Model):
    """One observed fact, with where it came from (the raw payload is an artifact)."""

    evidence_id: str
    source: str
    """The tool that produced it, e.g. ``prometheus.query_range``."""
    summary: str
    query: str | None = None
    window_start: AwareDatetime | None = None
    window_end: AwareDatetime | None = None
    partial: bool = False
    artifact_ref: str | None = None
    data: dict[str, object] = Field(default_factory=dict)


class Hypothesis(Model):
    """A candidate explanation: never a fact, always citing evidence."""

    statement: str
    confidence: float = Field(ge=0, le=1)
    evidence_ids: tuple[str, ...]
    unverified: tuple[str, ...] = ()


class BranchResult(Model):
    """What a branch hands back to the join."""

    branch: BranchKind
    stop_reason: StopReason
    evidence: tuple[Evidence, ...] = ()
    hypotheses: tuple[Hypothesis, ...] = ()
    usage: dict[BudgetDimension, int] = Field(default_factory=dict)
    error: str | None = None
    gap: str | None = None
    """Set when the branch could not look at all because no source for its tools is configured: the
    join reports it as a stated gap (the ticket is still drafted), not as a failed investigation."""
