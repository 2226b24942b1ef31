"""Source events again from what the store kept: a stored alert or change as its source sends it.

The store keeps each alert state normalized (labels, annotations, times, fingerprint), not the
webhook body it came in. An Alertmanager-shaped body carrying exactly those fields normalizes
back to the same alert, so that is what a recorded bundle holds: Alertmanager and Grafana alerts
under their own source (Grafana's webhook embeds Alertmanager's), and generic alerts (whose
source signs with HMAC, which a replay cannot) as Alertmanager alerts named by ``alertname``.
A change is its own documented body, with its source's id so it stays one change.
"""

from __future__ import annotations

from datetime import UTC, datetime

from ira.core.alert import AlertEvent, ChangeEvent, SourceKind
from ira.infra.bundle.format import SourceEvent

GO_ZERO_TIME = "0001-01-01T00:00:00Z"
"""Alertmanager's ``endsAt`` of an alert that has not ended."""
_OWN_WEBHOOK = frozenset({SourceKind.ALERTMANAGER, SourceKind.GRAFANA})


def alert_source_event(alert: AlertEvent, *, offset_seconds: float) -> SourceEvent:
    labels = {"alertname": alert.name, **alert.labels}
    labels.setdefault("severity", alert.severity.value)
    body = {"status": alert.status.value, "labels": labels, "annotations": dict(alert.annotations),
            "startsAt": _iso(alert.starts_at), "endsAt": _iso(alert.ends_at) if alert.ends_at else GO_ZERO_TIME,
            "generatorURL": alert.generator_url or "", "fingerprint": alert.fingerprint}
    kind = alert.source_kind if alert.source_kind in _OWN_WEBHOOK else SourceKind.ALERTMANAGER
    payload = {"receiver": "ira", "status": alert.status.value, "alerts": [body]}
    return SourceEvent(offset_seconds=offset_seconds, kind=kind.value, source_id=alert.source_id,
                       path=f"/v1/sources/{kind.value}/{alert.source_id}", payload=payload)


def change_source_event(change: ChangeEvent, *, offset_seconds: float) -> SourceEvent:
    fields = {"service": change.service, "at": _iso(change.at), "environment": change.environment,
              "version": change.version, "commit": change.commit, "actor": change.actor, "url": change.url,
              "description": change.description, "id": change.source_event_id}
    kind = SourceKind.CHANGE.value
    return SourceEvent(offset_seconds=offset_seconds, kind=kind, source_id=change.source_id,
                       path=f"/v1/sources/{kind}/{change.source_id}",
                       payload={k: v for k, v in fields.items() if v is not None})


def _iso(at: datetime) -> str:
    return at.astimezone(UTC).isoformat().replace("+00:00", "Z")
