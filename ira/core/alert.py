"""Alerts, incidents and triage's evaluations (DESIGN.md §1 steps 1-2)."""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum

from pydantic import AwareDatetime, Field

from ira.core.model import Model


class AlertStatus(StrEnum):
    FIRING = "firing"
    RESOLVED = "resolved"


class Severity(StrEnum):
    CRITICAL = "critical"
    HIGH = "high"
    WARNING = "warning"
    INFO = "info"


SEVERITY_RANK = {Severity.INFO: 0, Severity.WARNING: 1, Severity.HIGH: 2, Severity.CRITICAL: 3}
"""Severities in order: a higher rank is more severe."""


class SourceKind(StrEnum):
    ALERTMANAGER = "alertmanager"
    GRAFANA = "grafana"
    GENERIC = "generic"
    CHANGE = "change"


class AlertEvent(Model):
    """One normalized alert state change. Identity: (tenant_id, source_id, source_event_id)."""

    event_id: str
    tenant_id: str
    source_id: str
    source_kind: SourceKind
    source_event_id: str
    """Stable per alert *state*: the same state re-sent is the same id; a new firing is not."""
    fingerprint: str
    """Stable per alert across its states; the Kafka key and the grouping input."""
    status: AlertStatus
    name: str
    severity: Severity
    labels: dict[str, str] = Field(default_factory=dict)
    annotations: dict[str, str] = Field(default_factory=dict)
    starts_at: AwareDatetime
    ends_at: AwareDatetime | None = None
    generator_url: str | None = None
    received_at: AwareDatetime
    environment: str | None = None
    service: str | None = None


class DecisionKind(StrEnum):
    CREATE_RUN = "create_run"
    DELIVER = "deliver"
    IGNORE = "ignore"


class Incident(Model):
    """A group of related alerts; one open incident per group key."""

    incident_id: str
    tenant_id: str
    group_key: str
    version: int
    """Bumped whenever the incident's alerts change; approvals bind to it."""
    status: str
    opened_at: datetime
    labels: dict[str, str] = Field(default_factory=dict)


class Evaluation(Model):
    """Triage's decision about one alert event, with the facts it was based on."""

    evaluation_id: str
    tenant_id: str
    event_id: str
    incident_id: str | None
    decision: DecisionKind
    reason: str
    basis: dict[str, object] = Field(default_factory=dict)
    at: datetime


class ChangeEvent(Model):
    """A deploy or config change (``change`` sources): investigators line it up with symptoms.

    Published on ``ira.alerts.v1`` as envelope type ``change.recorded``, keyed by
    ``tenant:service``; triage stores it, never groups it into an incident.
    """

    event_id: str
    tenant_id: str
    source_id: str
    source_event_id: str
    service: str
    environment: str
    version: str | None = None
    commit: str | None = None
    actor: str | None = None
    at: AwareDatetime
    url: str | None = None
    description: str | None = None
    received_at: AwareDatetime


ALERT_MESSAGE = "alert.received"
"""Envelope type of an AlertEvent on ``ira.alerts.v1``."""
CHANGE_MESSAGE = "change.recorded"
"""Envelope type of a ChangeEvent on ``ira.alerts.v1``."""
ALERTS_INBOX = "triage"
"""The consumer (inbox name) that applies ``ira.alerts.v1``: an accepted event is sent again
until this inbox holds it."""
