"""What the edge accepts, the store can hold (issue #15): every boundary value of an alert's
name, service and environment, and a NUL, posted through the real parsers into triage on SQLite
and PostgreSQL. At the limit: accepted and found in an incident. One past it, or a NUL: 422
naming the field, nothing stored. A value a column still refuses later is dead-lettered at once
(tests/runtime/test_bus.py), never retried in place."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest

from ira.core import limits
from ira.core.alert import SourceKind
from ira.core.clock import FrozenClock
from ira.runtime.store.database import Database
from ira.sources import alertmanager, change, generic
from ira.sources.context import SourceContext
from ira.sources.errors import InvalidPayloadError
from tests.triage.harness import apply, handler, incident_rows

NOW = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)


def context() -> SourceContext:
    return SourceContext(tenant_id="acme", source_id="am", source_kind=SourceKind.ALERTMANAGER, received_at=NOW)


def am_body(**labels: str) -> bytes:
    alert = {"status": "firing", "labels": {"alertname": "Boundary", "severity": "critical", **labels},
             "annotations": {}, "startsAt": NOW.isoformat(), "endsAt": "0001-01-01T00:00:00Z"}
    return json.dumps({"receiver": "ira", "status": "firing", "alerts": [alert]}).encode()


AT_THE_LIMIT = {
    "name": {"alertname": "n" * limits.ALERT_NAME_MAX},
    "service": {"service": "s" * limits.SERVICE_MAX},
    "environment": {"environment": "e" * limits.ENVIRONMENT_MAX},
    "job as service": {"job": "j" * limits.SERVICE_MAX},
    "every one": {"alertname": "N" * limits.ALERT_NAME_MAX, "service": "S" * limits.SERVICE_MAX,
                  "env": "E" * limits.ENVIRONMENT_MAX},
    "unicode": {"alertname": "é" * limits.ALERT_NAME_MAX, "service": "服" * limits.SERVICE_MAX},
}

ONE_PAST = {
    "name": ({"alertname": "n" * (limits.ALERT_NAME_MAX + 1)}, "body.alerts.0.labels.alertname"),
    "service": ({"service": "s" * (limits.SERVICE_MAX + 1)}, "body.alerts.0.labels.service"),
    "job": ({"job": "j" * (limits.SERVICE_MAX + 1)}, "body.alerts.0.labels.job"),
    "environment": ({"environment": "e" * (limits.ENVIRONMENT_MAX + 1)}, "body.alerts.0.labels.environment"),
    "env": ({"env": "e" * (limits.ENVIRONMENT_MAX + 1)}, "body.alerts.0.labels.env"),
    "NUL in a value": ({"service": "check\x00out"}, "body.alerts.0"),
    "NUL in a key": ({"ok\x00": "x"}, "body.alerts.0"),
}


@pytest.mark.parametrize("case", sorted(AT_THE_LIMIT))
async def test_a_value_at_the_limit_is_accepted_and_lands_in_an_incident(db: Database, case: str) -> None:
    [event] = alertmanager.events(am_body(**AT_THE_LIMIT[case]), context())
    evaluation = await apply(db, handler(FrozenClock(NOW)), event)
    [incident] = await incident_rows(db)
    assert evaluation.incident_id == incident["incident_id"]
    assert (incident["service"], incident["environment"]) == (event.service, event.environment)


@pytest.mark.parametrize("case", sorted(ONE_PAST))
def test_one_past_the_limit_or_a_nul_is_refused_naming_the_field(case: str) -> None:
    labels, field = ONE_PAST[case]
    with pytest.raises(InvalidPayloadError) as refused:
        alertmanager.events(am_body(**labels), context())
    assert [p.field for p in refused.value.problems] == [field]


def test_a_generic_title_too_long_names_the_title_of_its_item() -> None:
    items = [{"id": f"alert-{i}", "title": title, "status": "firing", "starts_at": NOW.isoformat()}
             for i, title in enumerate(["ok", "t" * (limits.ALERT_NAME_MAX + 1)])]
    with pytest.raises(InvalidPayloadError) as refused:
        generic.events(json.dumps(items).encode(), context())
    assert [p.field for p in refused.value.problems] == ["body.1.title"]


@pytest.mark.parametrize(("field", "value"), [("service", "s" * (limits.SERVICE_MAX + 1)),
                                               ("environment", "e" * (limits.ENVIRONMENT_MAX + 1)),
                                               ("commit", "c" * (limits.COMMIT_MAX + 1)),
                                               ("version", "v" * (limits.VERSION_MAX + 1)),
                                               ("description", "a\x00b")])
def test_a_change_that_a_column_could_not_hold_is_refused_naming_the_field(field: str, value: str) -> None:
    body = {"service": "checkout", "environment": "prod", "at": NOW.isoformat(), field: value}
    with pytest.raises(InvalidPayloadError) as refused:
        change.events(json.dumps(body).encode(), context())
    assert [p.field for p in refused.value.problems] == [f"body.{field}"]
