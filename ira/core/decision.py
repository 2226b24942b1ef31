"""What triage tells the coordinator (envelope type ``incident.decision``): ``create_run`` on
``ira.incidents.v1``, ``deliver`` on ``ira.incident-updates.v1``.

Only ``create_run`` and ``deliver`` are published; ``ignore`` stays in triage's evaluations.
The coordinator is idempotent on ``evaluation_id`` (C1 runs are keyed by it).
"""

from __future__ import annotations

from pydantic import AwareDatetime, Field

from ira.core.alert import AlertEvent, DecisionKind
from ira.core.model import Model

DECISION_MESSAGE = "incident.decision"
DECISIONS_INBOX = "coordinator"
"""The consumer (inbox name) that applies run requests: a decision is sent again until it holds it."""
UPDATES_INBOX = "coordinator-updates"
"""The consumer (inbox name) that applies ``deliver`` decisions, from their own topic."""


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
