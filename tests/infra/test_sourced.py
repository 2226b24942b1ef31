"""A stored alert or change as a source event again: sent through its source's normalizer, it is the
same alert state (identity, labels, annotations, times) or the same change."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest

from ira.core.alert import AlertStatus, SourceKind
from ira.infra.bundle.sourced import alert_source_event, change_source_event
from ira.sources import alertmanager, change, generic, grafana
from ira.sources.context import SourceContext

AT = datetime(2026, 9, 14, 16, 40, 10, 250000, tzinfo=UTC)
NORMALIZE = {SourceKind.ALERTMANAGER: alertmanager.events, SourceKind.GRAFANA: grafana.events}


def context(kind: SourceKind, source_id: str = "src") -> SourceContext:
    return SourceContext(tenant_id="acme", source_id=source_id, source_kind=kind, received_at=AT,
                         default_environment="prod")


@pytest.mark.parametrize("kind", [SourceKind.ALERTMANAGER, SourceKind.GRAFANA])
def test_a_stored_alert_normalizes_back_to_the_same_state(kind: SourceKind) -> None:
    [stored] = NORMALIZE[kind](json.dumps({"status": "resolved", "alerts": [{
        "status": "resolved", "labels": {"alertname": "QueueBacklog", "service": "billing-worker", "severity": "page"},
        "annotations": {"summary": "backlog 9k"}, "startsAt": "2026-09-14T16:30:00.5Z",
        "endsAt": "2026-09-14T16:39:00Z", "generatorURL": "http://prom/graph", "fingerprint": "ab12"}]}).encode(),
        context(kind))

    event = alert_source_event(stored, offset_seconds=12.5)

    assert (event.kind, event.source_id, event.path) == (kind.value, "src", f"/v1/sources/{kind.value}/src")
    [again] = NORMALIZE[kind](json.dumps(event.payload).encode(), context(kind))
    assert again.model_dump(exclude={"received_at"}) == stored.model_dump(exclude={"received_at"})


def test_a_generic_alert_is_sent_as_an_alertmanager_alert_of_the_same_name_and_severity() -> None:
    [stored] = generic.events(json.dumps({"id": "disk-7", "title": "Disk almost full", "status": "firing",
                                          "starts_at": "2026-09-14T16:30:00Z", "severity": "critical",
                                          "labels": {"service": "db"}}).encode(), context(SourceKind.GENERIC))

    event = alert_source_event(stored, offset_seconds=0)

    assert event.kind == "alertmanager" and event.path == "/v1/sources/alertmanager/src"
    [again] = alertmanager.events(json.dumps(event.payload).encode(), context(SourceKind.ALERTMANAGER))
    assert (again.name, again.severity, again.fingerprint, again.status, again.starts_at, again.service) == (
        "Disk almost full", stored.severity, "disk-7", AlertStatus.FIRING, stored.starts_at, "db")


def test_a_stored_change_is_the_same_change_again() -> None:
    ctx = context(SourceKind.CHANGE, "deploys")
    [stored] = change.events(json.dumps({"service": "billing-worker", "at": "2026-09-14T16:20:00Z",
                                         "version": "2.0.1", "actor": "ci"}).encode(), ctx)

    event = change_source_event(stored, offset_seconds=0)

    assert event.path == "/v1/sources/change/deploys"
    [again] = change.events(json.dumps(event.payload).encode(), ctx)
    assert again == stored
    assert again.at == AT - timedelta(minutes=20, seconds=10, microseconds=250000)
