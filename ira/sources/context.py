"""The source a payload came from, and the one way every kind builds its events.

Normalizers are pure: they get the payload and this context (who sent it, when it arrived)
and return events. Identity, severity, environment and service are decided here once, so
an Alertmanager alert and a Grafana alert with the same labels are described the same way.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime

from ira.core.alert import AlertEvent, AlertStatus, ChangeEvent, SourceKind
from ira.sources import identity
from ira.sources.labels import environment_of, service_of, severity_of

UNNAMED = "unnamed"
"""The name of an alert that carries no ``alertname`` label and no title."""


@dataclass(frozen=True)
class SourceContext:
    """Who sent the payload and when it arrived (the same for every event of one request)."""

    tenant_id: str
    source_id: str
    source_kind: SourceKind
    received_at: datetime
    default_environment: str | None = None

    def alert(
        self,
        *,
        fingerprint: str | None,
        status: AlertStatus,
        labels: Mapping[str, str],
        annotations: Mapping[str, str],
        starts_at: datetime,
        ends_at: datetime | None = None,
        generator_url: str | None = None,
        name: str | None = None,
        severity: str | None = None,
    ) -> AlertEvent:
        """One AlertEvent; ``fingerprint`` None -> computed from the labels like Alertmanager does."""
        fingerprint = fingerprint or identity.label_fingerprint(labels)
        source_event_id = identity.state_id(fingerprint, status.value, starts_at)
        return AlertEvent(
            event_id=identity.event_id(self.tenant_id, self.source_id, source_event_id),
            tenant_id=self.tenant_id, source_id=self.source_id, source_kind=self.source_kind,
            source_event_id=source_event_id, fingerprint=fingerprint, status=status,
            name=name or labels.get("alertname") or UNNAMED,
            severity=severity_of(severity if severity is not None else labels.get("severity")),
            labels=labels, annotations=annotations, starts_at=starts_at, ends_at=ends_at,
            generator_url=generator_url or None, received_at=self.received_at,
            environment=environment_of(labels, self.default_environment), service=service_of(labels),
        )

    def change(
        self,
        *,
        source_event_id: str,
        service: str,
        environment: str,
        at: datetime,
        version: str | None = None,
        commit: str | None = None,
        actor: str | None = None,
        url: str | None = None,
        description: str | None = None,
    ) -> ChangeEvent:
        """One ChangeEvent, identified like an alert state: the same change re-sent is one event."""
        return ChangeEvent(
            event_id=identity.event_id(self.tenant_id, self.source_id, source_event_id),
            tenant_id=self.tenant_id, source_id=self.source_id, source_event_id=source_event_id,
            service=service, environment=environment, at=at, received_at=self.received_at,
            version=version, commit=commit, actor=actor, url=url, description=description,
        )
