"""The pure parts of the edge: identity, severity, labels, normalizers, rate windows. No I/O."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime, timedelta, timezone

import pytest

from ira.core.alert import AlertStatus, Severity, SourceKind
from ira.sources import alertmanager, change, generic, grafana
from ira.sources.context import SourceContext
from ira.sources.errors import InvalidPayloadError
from ira.sources.identity import EVENT_NAMESPACE, event_id, label_fingerprint, state_id
from ira.sources.labels import environment_of, service_of, severity_of
from ira.sources.ratelimit import window_of
from tests.sources.harness import fixture

RECEIVED = datetime(2026, 4, 29, 2, 40, tzinfo=UTC)
START = datetime(2026, 4, 29, 2, 37, tzinfo=UTC)


def context(kind: SourceKind = SourceKind.ALERTMANAGER, default_environment: str | None = None) -> SourceContext:
    return SourceContext(tenant_id="demo", source_id="am", source_kind=kind, received_at=RECEIVED,
                         default_environment=default_environment)


def raw(document: object) -> bytes:
    return json.dumps(document).encode()


def test_computed_fingerprint_is_alertmanagers_own() -> None:
    alert = fixture("alertmanager_payload.json")["alerts"][0]
    assert label_fingerprint(alert["labels"]) == alert["fingerprint"] == "327eade690f11e7c"
    assert label_fingerprint({}) == "cbf29ce484222325"  # Prometheus's empty label set signature


def test_fingerprint_ignores_label_order_but_not_values() -> None:
    assert label_fingerprint({"a": "1", "b": "2"}) == label_fingerprint({"b": "2", "a": "1"})
    assert label_fingerprint({"a": "1", "b": "2"}) != label_fingerprint({"a": "1", "b": "3"})
    assert label_fingerprint({"ab": "c"}) != label_fingerprint({"a": "bc"})  # the separator counts


def test_state_id_is_one_per_alert_state() -> None:
    same_instant = START.astimezone(timezone(timedelta(hours=8))).astimezone(UTC)
    assert state_id("fp", "firing", START) == state_id("fp", "firing", same_instant)
    assert state_id("fp", "firing", START) != state_id("fp", "resolved", START)  # the resolve is new
    assert state_id("fp", "firing", START) != state_id("fp", "firing", START + timedelta(hours=1))  # a new firing


def test_event_id_is_a_stable_uuid5_per_tenant_source_and_state() -> None:
    assert event_id("demo", "am", "s1") == event_id("demo", "am", "s1")
    assert len({event_id("demo", "am", "s1"), event_id("acme", "am", "s1"), event_id("demo", "am2", "s1")}) == 3
    for parts in (("demo", "am", "s1"), ("t", "ü-source", "x" * 64)):
        assert event_id(*parts) == str(uuid.uuid5(EVENT_NAMESPACE, "\x1f".join(parts)))


@pytest.mark.parametrize(("value", "expected"), [
    ("critical", Severity.CRITICAL), ("page", Severity.CRITICAL), (" P1 ", Severity.CRITICAL),
    ("high", Severity.HIGH), ("error", Severity.HIGH), ("warning", Severity.WARNING), ("WARN", Severity.WARNING),
    ("info", Severity.INFO), ("none", Severity.INFO), ("banana", Severity.WARNING), ("", Severity.WARNING),
    (None, Severity.WARNING),
])
def test_severity_mapping(value: str | None, expected: Severity) -> None:
    assert severity_of(value) == expected


@pytest.mark.parametrize(("labels", "default", "environment", "service"), [
    ({"environment": "prod", "env": "dev", "service": "api", "job": "node"}, "x", "prod", "api"),
    ({"env": "dev", "job": "node"}, "x", "dev", "node"),
    ({"environment": ""}, "staging", "staging", None),
    ({}, None, None, None),
])
def test_environment_and_service_come_from_labels_then_defaults(
    labels: dict[str, str], default: str | None, environment: str | None, service: str | None
) -> None:
    assert (environment_of(labels, default), service_of(labels)) == (environment, service)


def test_alertmanager_payload_without_fingerprints_gets_them_computed() -> None:
    payload = fixture("alertmanager_payload.json")
    del payload["alerts"][0]["fingerprint"]
    [event] = alertmanager.events(raw(payload), context(default_environment="prod"))
    assert event.fingerprint == "327eade690f11e7c"
    assert (event.environment, event.ends_at, event.source_kind) == ("prod", None, SourceKind.ALERTMANAGER)


def test_alertmanager_payload_with_n_alerts_gives_n_events_in_order() -> None:
    payload = fixture("alertmanager_payload.json")
    second = json.loads(json.dumps(payload["alerts"][0]))
    second["labels"]["instance"] = "10.0.0.2:9100"
    second.pop("fingerprint")
    payload["alerts"].append(second)
    events = alertmanager.events(raw(payload), context())
    assert [e.labels["instance"] for e in events] == ["127.0.0.1:39094", "10.0.0.2:9100"]
    assert len({e.event_id for e in events}) == 2


def test_grafana_alerts_keep_their_links_and_utc_times() -> None:
    firing, resolved = grafana.events(raw(fixture("grafana_webhook_payload.json")), context(SourceKind.GRAFANA))
    assert firing.starts_at == START and firing.status == AlertStatus.FIRING
    assert firing.annotations["panel_url"].endswith("viewPanel=4")
    assert resolved.ends_at == datetime(2026, 4, 29, 2, 44, tzinfo=UTC)


def test_generic_single_event_and_list_are_both_accepted() -> None:
    one = {"id": "a-1", "title": "A", "status": "resolved", "starts_at": "2026-04-29T10:37:00+08:00"}
    [single] = generic.events(raw(one), context(SourceKind.GENERIC))
    assert generic.events(b"  \n" + raw([one, one | {"id": "a-2"}]), context(SourceKind.GENERIC))[0] == single
    assert (single.fingerprint, single.status, single.starts_at) == ("a-1", AlertStatus.RESOLVED, START)


@pytest.mark.parametrize("bad_id", ["", "has space", "x" * 201, "ünïcode"])
def test_generic_ids_are_plain_tokens(bad_id: str) -> None:
    body = {"id": bad_id, "title": "A", "status": "firing", "starts_at": "2026-04-29T10:37:00Z"}
    with pytest.raises(InvalidPayloadError) as refused:
        generic.events(raw(body), context(SourceKind.GENERIC))
    assert [p.field for p in refused.value.problems] == ["body.id"]


def test_the_same_change_reported_twice_has_one_identity_and_an_id_wins() -> None:
    body = {"service": "orders", "environment": "prod", "at": "2026-04-29T10:31:00Z", "version": "v2"}
    first, second = change.events(raw([body, dict(body)]), context(SourceKind.CHANGE))
    assert first.event_id == second.event_id
    [named] = change.events(raw(body | {"id": "deploy-4411"}), context(SourceKind.CHANGE))
    assert named.source_event_id == "deploy-4411"


@pytest.mark.parametrize(("rate", "window_ms", "limit"), [
    (100, 1000, 100), (1, 1000, 1), (2.5, 1000, 2), (0.5, 2000, 1), (0.1, 10000, 1),
])
def test_rate_windows_keep_a_whole_limit(rate: float, window_ms: int, limit: int) -> None:
    assert window_of(rate) == (window_ms, limit)
