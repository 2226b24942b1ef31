"""What triage tells the coordinator: ``create_run`` decisions on ``ira.incidents.v1``
(envelope type ``incident.decision``) and coalesced incident updates on
``ira.incident-updates.v1`` (envelope type ``incident.update``).

``ignore`` stays in triage's evaluations. A follow-up alert to an incident whose run is active
is a ``deliver`` evaluation, but it is not sent on its own: triage folds it into the run's
pending :class:`IncidentUpdate` (joined, resolved, counts, first/last seen), sent at most once
per ``triage.update_interval`` and at once when the incident is all resolved or its severity
rose. The coordinator is idempotent on ``evaluation_id`` (C1 runs are keyed by it) and on
``update_id`` (its inbox).
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum

from pydantic import AwareDatetime, Field

from ira.core.alert import AlertEvent, DecisionKind, Severity
from ira.core.envelope import Topic
from ira.core.model import Model

DECISION_MESSAGE = "incident.decision"
UPDATE_MESSAGE = "incident.update"
DECISIONS_INBOX = "coordinator"
"""The consumer (inbox name) that applies run requests: a decision is sent again until it holds it."""
UPDATES_INBOX = "coordinator-updates"
"""The consumer (inbox name) that applies incident updates, from their own topic."""


class Route(Model):
    """Where a kind of decision travels and whose inbox must come to hold it."""

    topic: Topic
    inbox: str


ROUTES: Mapping[DecisionKind, Route] = {
    # a new incident's run request never waits behind a storm of follow-ups: they have their own topic
    DecisionKind.CREATE_RUN: Route(topic=Topic.INCIDENTS, inbox=DECISIONS_INBOX),
    DecisionKind.DELIVER: Route(topic=Topic.INCIDENT_UPDATES, inbox=UPDATES_INBOX),
}
"""The one mapping from a published decision kind to its topic and awaited inbox."""


class IncidentDecision(Model):
    """A decision about one incident, with the alert that caused it."""

    evaluation_id: str
    decision: DecisionKind
    tenant_id: str
    incident_id: str
    incident_version: int
    """Approvals bind to this: a new alert in the incident makes an old approval stale."""
    group_key: str
    service: str | None = None
    environment: str | None = None
    severity: str
    title: str
    alert: AlertEvent
    opened_at: AwareDatetime
    reason: str
    basis: dict[str, object] = Field(default_factory=dict)


class UpdateTrigger(StrEnum):
    """Why a pending update went out when it did."""

    INTERVAL = "interval"
    """The first follow-up after a quiet interval, or the interval since the last update passed."""
    ALL_RESOLVED = "all_resolved"
    SEVERITY_RAISED = "severity_raised"


class IncidentChanges(Model):
    """What follow-up alerts changed in an incident since its run's last update (a fold)."""

    events: int = 0
    """Alert events folded in."""
    joined: int = 0
    """Alerts (by fingerprint) that were not part of the incident before."""
    resolved: int = 0
    refired: int = 0
    """Alerts that fired again after having resolved."""
    names_joined: tuple[str, ...] = ()
    """The distinct alert names among ``joined``, sorted (at most :data:`NAMES_KEPT`)."""
    names_resolved: tuple[str, ...] = ()
    first_seen: AwareDatetime | None = None
    last_seen: AwareDatetime | None = None
    incident_version: int = 0
    """The incident's version after the last folded event."""
    firing_count: int = 0
    severity: Severity = Severity.INFO
    """The incident's severity after the last folded event."""
    last_evaluation_id: str | None = None
    traceparent: str | None = None
    """The trace of the first follow-up folded in: the update continues it (the run's trace links it)."""


NAMES_KEPT = 20
"""Alert names kept per list in one update: a storm of thousands of distinct names is a count."""


class IncidentUpdate(Model):
    """One coalesced update to a run's subscription (``incident.update``)."""

    update_id: str
    """``{run_id}:{seq}``: the same update sent twice is one inbox row."""
    tenant_id: str
    incident_id: str
    run_id: str
    seq: int
    """1 for the run's first update, then 2, 3, ... (no gaps)."""
    trigger: UpdateTrigger
    changes: IncidentChanges

    @property
    def all_resolved(self) -> bool:
        return self.changes.firing_count == 0


def update_id(run_id: str, seq: int) -> str:
    return f"{run_id}:{seq}"
