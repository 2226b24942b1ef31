"""What the edge accepts, the store can hold (issue #15), on SQLite and PostgreSQL.

Every boundary value (at the limit, one past it, a NUL, multi-byte characters at the edge,
labels per alert, label name and value sizes, alerts per request) is POSTed to the real
sources lane (``ingest.ack: store``), published by the relay, and triaged by the triage
consumer on the real broker. Each accepted alert is then found in an incident; each refused
request got a 4xx naming the field, and nothing of it was stored. Alertmanager's values that a
column cannot hold are cut to fit with a marker (``ira.core.limits``), the generic schema's are
refused; the tables are declared with the same numbers.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

import httpx
import pytest
from redis.asyncio import Redis
from sqlalchemy import String, select

from ira.core import limits
from ira.core.clock import SystemClock
from ira.infra.tansu import EmbeddedKafka
from ira.runtime.bus.producer import BusProducer
from ira.runtime.settings.triage import TriageSettings
from ira.runtime.store.database import Database
from ira.runtime.store.group_commit import GroupCommit
from ira.triage.noise import NoNoiseState
from ira.triage.tables import alerts, changes, incidents
from ira.triage.worker import TriageHandler
from tests.eventually import eventually
from tests.sources.harness import AM, AM_TOKEN, bearer, harness, settings, signed
from tests.triage.kafka_harness import relay, running, triage_consumer

NOW = datetime.now(UTC).replace(microsecond=0)
PER_REQUEST = 50
GENERIC = "/v1/sources/generic/generic"


def am_alert(case: str, **labels: str) -> dict[str, Any]:
    return {"status": "firing", "labels": {"alertname": "Boundary", "case": case, **labels},
            "annotations": {}, "startsAt": NOW.isoformat(), "endsAt": "0001-01-01T00:00:00Z"}


def am_body(*alerts: dict[str, Any]) -> bytes:
    return json.dumps({"receiver": "ira", "status": "firing", "alerts": list(alerts)}).encode()


def many_labels(count: int) -> dict[str, str]:
    return {f"l{i:04d}": "v" for i in range(count - 2)}  # plus alertname and case


ACCEPTED_AM: Mapping[str, dict[str, str]] = {
    "name at the limit": {"alertname": "n" * limits.ALERT_NAME_MAX},
    "name one past": {"alertname": "N" * (limits.ALERT_NAME_MAX + 1)},
    "service at the limit": {"service": "s" * limits.SERVICE_MAX},
    "service one past": {"service": "S" * (limits.SERVICE_MAX + 50)},
    "job one past": {"job": "j" * (limits.SERVICE_MAX + 1)},
    "environment at the limit": {"environment": "e" * limits.ENVIRONMENT_MAX},
    "env one past": {"env": "E" * (limits.ENVIRONMENT_MAX + 1)},
    "two-byte name at the limit": {"alertname": "é" * limits.ALERT_NAME_MAX},
    "three-byte service at the limit": {"service": "服" * limits.SERVICE_MAX},
    "four-byte environment at the limit": {"environment": "🔥" * limits.ENVIRONMENT_MAX},
    "four-byte environment one past": {"environment": "🔥" * (limits.ENVIRONMENT_MAX + 1)},
    "NUL in a value": {"service": "check\x00out"},
    "NUL in a key": {"ok\x00": "x"},
    "labels at the limit": many_labels(limits.LABELS_MAX),
    "label name at the limit": {"k" * limits.LABEL_NAME_MAX: "v"},
    "label value at the limit": {"big": "v" * limits.TEXT_MAX},
}
"""Alertmanager alerts the edge accepts: at a limit, or cut to fit (name, service, environment)."""

REFUSED_AM: Mapping[str, tuple[bytes, int, str]] = {
    "labels one past": (am_body(am_alert("x", **many_labels(limits.LABELS_MAX + 1))), 422, "body.alerts.0.labels"),
    "label name one past": (am_body(am_alert("x", **{"k" * (limits.LABEL_NAME_MAX + 1): "v"})), 422,
                            f"body.alerts.0.labels.{'k' * (limits.LABEL_NAME_MAX + 1)}.[key]"),
    "label value one past": (am_body(am_alert("x", big="v" * (limits.TEXT_MAX + 1))), 422,
                             "body.alerts.0.labels.big"),
    "fingerprint one past": (am_body({**am_alert("x"), "fingerprint": "f" * (limits.FINGERPRINT_MAX + 1)}), 422,
                             "body.alerts.0.fingerprint"),
    "alerts per request one past": (am_body(*(am_alert(f"r{i}") for i in range(PER_REQUEST + 1))), 413,
                                    "max_alerts_per_request"),
}
"""Refused requests: status, and the field named (for a 413, the limit named)."""


def generic_item(**fields: Any) -> dict[str, Any]:
    return {"id": "boundary-1", "title": "Boundary", "status": "firing", "starts_at": NOW.isoformat(), **fields}


ACCEPTED_GENERIC = {
    "title at the limit": generic_item(id="g-title", title="t" * limits.ALERT_NAME_MAX),
    "four-byte title at the limit": generic_item(id="g-emoji", title="🔥" * limits.ALERT_NAME_MAX),
    "id at the limit": generic_item(id="i" * limits.FINGERPRINT_MAX),
}
REFUSED_GENERIC = {
    "title one past": (generic_item(title="t" * (limits.ALERT_NAME_MAX + 1)), "body.title"),
    "service one past": (generic_item(labels={"service": "s" * (limits.SERVICE_MAX + 1)}), "body.labels.service"),
    "environment one past": (generic_item(labels={"env": "e" * (limits.ENVIRONMENT_MAX + 1)}), "body.labels.env"),
    "NUL": (generic_item(labels={"service": "a\x00b"}), "body"),
    "id one past": (generic_item(id="i" * (limits.FINGERPRINT_MAX + 1)), "body.id"),
}


async def post_every_case(client: httpx.AsyncClient) -> tuple[list[str], dict[str, httpx.Response]]:
    """Every case in its own request: the accepted ones' event ids, and each refused answer."""
    accepted, refused = [], {}
    full_request = am_body(*(am_alert(f"request-{i}") for i in range(PER_REQUEST)))
    bodies = [am_body(am_alert(case, **labels)) for case, labels in ACCEPTED_AM.items()] + [full_request]
    for body in bodies:
        answer = await client.post(AM, content=body, headers=bearer(AM_TOKEN))
        assert answer.status_code == 202, answer.text
        accepted += answer.json()["event_ids"]
    for item in ACCEPTED_GENERIC.values():
        body = json.dumps(item).encode()
        answer = await client.post(GENERIC, content=body, headers=signed(body))
        assert answer.status_code == 202, answer.text
        accepted += answer.json()["event_ids"]
    for case, (body, _, _) in REFUSED_AM.items():
        refused[case] = await client.post(AM, content=body, headers=bearer(AM_TOKEN))
    for case, (item, _) in REFUSED_GENERIC.items():
        body = json.dumps(item).encode()
        refused[case] = await client.post(GENERIC, content=body, headers=signed(body))
    return accepted, refused


async def stored_alerts(db: Database) -> dict[str, dict[str, Any]]:
    async with db.reader() as conn:
        rows = await conn.execute(select(alerts, incidents.c.service, incidents.c.environment)
                                  .join(incidents, incidents.c.incident_id == alerts.c.incident_id, isouter=True))
        return {row.event_id: dict(row._mapping) for row in rows}


@pytest.mark.timeout(180)
async def test_every_boundary_value_is_found_in_an_incident_or_refused_naming_its_field(
    db: Database, kafka: EmbeddedKafka, bus_env: str, producer: BusProducer, redis: Redis, redis_prefix: str
) -> None:
    # Given the real lane committing to the store, the relay, and triage on the broker
    config = settings(max_alerts_per_request=PER_REQUEST)
    edge = harness(environment=bus_env, redis=redis, outbox=GroupCommit(db, SystemClock()), clock=SystemClock(),
                   redis_prefix=redis_prefix, config=config)
    triage = TriageHandler(settings=TriageSettings(), environment=bus_env, clock=SystemClock(), noise=NoNoiseState())

    # When every boundary case is posted
    async with running(relay(db, producer), triage_consumer(kafka, bus_env, producer=producer, db=db,
                                                            handler=triage, batch_size=100)):
        async with edge.client() as client:
            accepted, refused = await post_every_case(client)

        # Then each accepted alert is triaged into an incident
        async def all_in_incidents() -> bool:
            found = await stored_alerts(db)
            return all(found.get(e, {}).get("incident_id") for e in accepted)

        await eventually(all_in_incidents, timeout=60, message="every accepted alert in an incident")

    assert len(accepted) == len(set(accepted)) == len(ACCEPTED_AM) + PER_REQUEST + len(ACCEPTED_GENERIC)
    found = await stored_alerts(db)
    assert set(found) == set(accepted)  # nothing of a refused request was stored
    # ... with the full values in its labels, and what its columns could not hold cut and marked
    by_case = {row["payload"]["labels"].get("case"): row for row in found.values()}
    cut = by_case["name one past"]
    assert cut["payload"]["labels"]["alertname"] == "N" * (limits.ALERT_NAME_MAX + 1)
    assert len(cut["name"]) == limits.ALERT_NAME_MAX and "…#" in cut["name"]
    assert len(by_case["four-byte environment one past"]["environment"]) == limits.ENVIRONMENT_MAX
    assert by_case["four-byte environment at the limit"]["environment"] == "🔥" * limits.ENVIRONMENT_MAX
    assert by_case["NUL in a value"]["service"] == "check\ufffdout"
    # And each refused request was answered 4xx naming its field
    expected = {case: (status, field) for case, (_, status, field) in REFUSED_AM.items()}
    expected |= {case: (422, field) for case, (_, field) in REFUSED_GENERIC.items()}
    assert {case: (r.status_code, named(r)) for case, r in refused.items()} == expected


def named(answer: httpx.Response) -> str | None:
    """The field a 422 names, or the limit a 413 names."""
    [error] = answer.json()["errors"]
    return error["field"] if answer.status_code == 422 else error["limit"]["name"]


def test_every_column_an_alert_fills_holds_what_the_edge_accepts() -> None:
    """The tables are declared with the limits the edge checks (a migration changing a length
    without the limit, or the other way round, fails here)."""
    declared = {(table.name, column.name): column.type.length for table in (alerts, incidents, changes)
                for column in table.columns if isinstance(column.type, String)}
    assert declared[("alerts", "name")] == limits.ALERT_NAME_MAX
    assert declared[("alerts", "fingerprint")] == limits.FINGERPRINT_MAX
    assert declared[("incidents", "service")] == declared[("changes", "service")] == limits.SERVICE_MAX
    assert declared[("incidents", "environment")] == declared[("changes", "environment")] == limits.ENVIRONMENT_MAX
    assert declared[("incidents", "title")] == limits.TITLE_MAX
    assert (declared[("changes", "version")], declared[("changes", "commit")], declared[("changes", "actor")]) == (
        limits.VERSION_MAX, limits.COMMIT_MAX, limits.ACTOR_MAX)
    assert declared[("changes", "source_event_id")] >= limits.FINGERPRINT_MAX  # a change's own id


@pytest.mark.parametrize(("value", "limit"), [("x" * 201, 200), ("é" * 300, 200), ("🔥" * 65, 64)])
def test_a_value_cut_to_fit_is_marked_and_stays_distinct(value: str, limit: int) -> None:
    cut, other = limits.fit(value, limit), limits.fit(value[:-1] + "y", limit)
    assert len(cut) == limit and cut.startswith(value[:limit - 10]) and "…#" in cut
    assert cut != other and limits.fit(value[:limit], limit) == value[:limit]
