"""Alert events and envelopes for triage tests, shaped exactly as the sources role publishes them."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

from ira.core.alert import ALERT_MESSAGE, CHANGE_MESSAGE, AlertEvent, AlertStatus, ChangeEvent, Severity, SourceKind
from ira.core.envelope import Envelope

T0 = datetime(2026, 11, 29, 9, 0, tzinfo=UTC)
TENANT = "acme"


def alert(
    name: str = "HighErrorRate", *, status: AlertStatus = AlertStatus.FIRING, fingerprint: str = "fp-1",
    service: str | None = "checkout", environment: str | None = "prod", severity: Severity = Severity.CRITICAL,
    at: datetime = T0, source_event_id: str | None = None, tenant_id: str = TENANT,
    labels: dict[str, str] | None = None,
) -> AlertEvent:
    """One alert state; ``at`` is the state's start (firing) or end (resolved), received at ``at`` too."""
    resolved = status == AlertStatus.RESOLVED
    return AlertEvent(
        event_id=str(uuid.uuid4()), tenant_id=tenant_id, source_id="am", source_kind=SourceKind.ALERTMANAGER,
        source_event_id=source_event_id or f"{fingerprint}:{status.value}:{at.isoformat()}",
        fingerprint=fingerprint, status=status, name=name, severity=severity,
        labels={"alertname": name, **(labels or {})}, annotations={"summary": f"{name} on {service}"},
        starts_at=at - timedelta(minutes=1) if resolved else at, ends_at=at if resolved else None,
        received_at=at, environment=environment, service=service)


def resolved(**kwargs: object) -> AlertEvent:
    return alert(status=AlertStatus.RESOLVED, **kwargs)  # type: ignore[arg-type]


def change(service: str = "checkout", *, at: datetime = T0, source_event_id: str = "deploy-1") -> ChangeEvent:
    return ChangeEvent(event_id=str(uuid.uuid4()), tenant_id=TENANT, source_id="changes",
                       source_event_id=source_event_id, service=service, environment="prod", version="v2.3.1",
                       commit="abc123", actor="ci", at=at, url="https://ci.example/1", description="deploy",
                       received_at=at)


def envelope(event: AlertEvent | ChangeEvent) -> Envelope:
    kind = ALERT_MESSAGE if isinstance(event, AlertEvent) else CHANGE_MESSAGE
    return Envelope(message_id=event.event_id, type=kind, tenant_id=event.tenant_id, occurred_at=event.received_at,
                    payload=event.model_dump(mode="json"))


def key(event: AlertEvent | ChangeEvent) -> str:
    tail = event.fingerprint if isinstance(event, AlertEvent) else event.service
    return f"{event.tenant_id}:{tail}"
