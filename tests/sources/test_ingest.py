"""The webhook endpoint end to end on the real embedded broker and a real Redis.

Given a fixture payload from a real Alertmanager or Grafana, when it is posted, then the
events on the test's ``ira.alerts.v1`` topic are exactly the expected ones.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

from redis.asyncio import Redis

from ira.core.alert import ALERT_MESSAGE, CHANGE_MESSAGE, AlertEvent, ChangeEvent
from ira.core.clock import FrozenClock
from ira.infra.tansu import EmbeddedKafka
from ira.runtime.bus.producer import BusProducer
from tests.processes import free_port
from tests.sources.harness import (
    AM_TOKEN,
    CHANGE_TOKEN,
    GRAFANA_TOKEN,
    Harness,
    bearer,
    fixture,
    harness,
    metric,
    read_topic,
    settings,
    signed,
)


async def post(edge: Harness, path: str, payload: object, headers: dict[str, str]) -> tuple[int, dict]:
    async with edge.client() as client:
        response = await client.post(path, content=json.dumps(payload).encode(), headers=headers)
    return response.status_code, response.json()


def alerts(received: list) -> list[AlertEvent]:
    return [AlertEvent.model_validate(r.envelope.payload) for r in received]


async def test_alertmanager_firing_then_resolved_are_two_distinct_events(edge: Harness, kafka: EmbeddedKafka) -> None:
    status, body = await post(edge, "/v1/sources/alertmanager/am", fixture("alertmanager_payload.json"),
                              bearer(AM_TOKEN))
    assert (status, body["accepted"], body["duplicates"]) == (202, 1, 0)
    status, resolved = await post(edge, "/v1/sources/alertmanager/am", fixture("alertmanager_payload_resolved.json"),
                                  bearer(AM_TOKEN))
    assert (status, resolved["accepted"]) == (202, 1)

    received = await read_topic(kafka.bootstrap, edge.topic)
    assert [r.envelope.type for r in received] == [ALERT_MESSAGE, ALERT_MESSAGE]
    assert {r.key for r in received} == {"demo:327eade690f11e7c"}
    firing, ended = sorted(alerts(received), key=lambda e: e.status != "firing")
    assert [firing.event_id, ended.event_id] == [body["event_ids"][0], resolved["event_ids"][0]]
    assert firing.event_id != ended.event_id
    assert (firing.name, firing.severity, firing.service, firing.environment) == (
        "HighErrorRate", "critical", "checkout", None)
    assert (firing.source_id, firing.source_kind, firing.tenant_id, firing.ends_at) == (
        "am", "alertmanager", "demo", None)
    assert firing.starts_at == datetime(2026, 11, 29, 9, 26, 52, 272000, tzinfo=UTC)
    assert firing.generator_url == "http://vm:39090/graph?g0.expr=feas_error_rate+%3E+0.5&g0.tab=1"
    assert firing.labels["severity"] == "page" and firing.annotations["summary"] == "High error rate on checkout"
    assert (ended.status, ended.ends_at) == ("resolved", datetime(2026, 11, 29, 9, 27, 6, 272000, tzinfo=UTC))
    assert {r.envelope.message_id for r in received} == {firing.event_id, ended.event_id}


async def test_the_same_alert_state_posted_again_is_a_duplicate_with_the_same_id(
    edge: Harness, kafka: EmbeddedKafka
) -> None:
    payload = fixture("alertmanager_payload.json")
    _, first = await post(edge, "/v1/sources/alertmanager/am", payload, bearer(AM_TOKEN))
    status, again = await post(edge, "/v1/sources/alertmanager/am", payload, bearer(AM_TOKEN))
    assert (status, again["accepted"], again["duplicates"]) == (202, 0, 1)
    assert again["event_ids"] == first["event_ids"]
    assert len(await read_topic(kafka.bootstrap, edge.topic)) == 1
    assert metric(edge.metrics, "ira_source_events_duplicate_total", {"source": "am"}) == 1
    assert metric(edge.metrics, "ira_source_events_accepted_total", {"source": "am"}) == 1
    assert metric(edge.metrics, "ira_source_ingest_seconds_count", {"source": "am"}) == 2


async def test_grafana_payload_gives_one_event_per_alert_instance(edge: Harness, kafka: EmbeddedKafka) -> None:
    status, body = await post(edge, "/v1/sources/grafana/grafana", fixture("grafana_webhook_payload.json"),
                              bearer(GRAFANA_TOKEN))
    assert (status, body["accepted"]) == (202, 2)
    by_name = {e.name: e for e in alerts(await read_topic(kafka.bootstrap, edge.topic))}
    latency, errors = by_name["OrderLatencyHigh"], by_name["OrderErrorsHigh"]
    assert (latency.status, latency.severity, latency.environment, latency.service) == (
        "firing", "critical", "prod", "order-service")
    assert latency.starts_at == datetime(2026, 4, 29, 2, 37, tzinfo=UTC)  # +08:00 normalised to UTC
    assert latency.fingerprint == "5d1c2b8f0a7e3c41"
    assert latency.annotations["dashboard_url"] == "https://grafana.example.internal/d/orders"
    assert latency.annotations["runbook_url"].endswith("/order-service/latency")
    assert (errors.status, errors.severity, errors.ends_at) == ("resolved", "warning", datetime(2026, 4, 29, 2, 44,
                                                                                              tzinfo=UTC))
    assert "dashboard_url" not in errors.annotations  # empty links are not kept


async def test_generic_signed_list_is_accepted_and_normalized(edge: Harness, kafka: EmbeddedKafka) -> None:
    events = [
        {"id": "db-disk-7", "title": "Disk almost full", "status": "firing", "starts_at": "2026-04-29T10:00:00Z",
         "severity": "P1", "labels": {"env": "staging", "service": "db"},
         "links": [{"url": "https://grafana.example/d/db", "title": "dashboard"}]},
        {"id": "db-disk-8", "title": "Disk filling", "status": "firing", "starts_at": "2026-04-29T10:00:00Z"},
    ]
    raw = json.dumps(events).encode()
    async with edge.client() as client:
        response = await client.post("/v1/sources/generic/generic", content=raw, headers=signed(raw))
    assert response.status_code == 202, response.text
    by_fingerprint = {e.fingerprint: e for e in alerts(await read_topic(kafka.bootstrap, edge.topic))}
    disk = by_fingerprint["db-disk-7"]
    assert (disk.name, disk.severity, disk.environment, disk.service) == (
        "Disk almost full", "critical", "staging", "db")
    assert disk.generator_url == "https://grafana.example/d/db"
    assert disk.annotations["link.dashboard"] == "https://grafana.example/d/db"
    assert by_fingerprint["db-disk-8"].severity == "warning"  # no severity at all -> warning


async def test_change_event_goes_out_keyed_by_service(edge: Harness, kafka: EmbeddedKafka) -> None:
    change = {"service": "order-service", "at": "2026-04-29T10:31:00+08:00", "version": "v2.14.0",
              "commit": "9f2c1e4", "actor": "deploy-bot", "url": "https://ci.example/runs/4411"}
    status, body = await post(edge, "/v1/sources/change/changes", change, bearer(CHANGE_TOKEN))
    assert (status, body["accepted"]) == (202, 1)
    again = await post(edge, "/v1/sources/change/changes", change, bearer(CHANGE_TOKEN))
    assert again[1]["duplicates"] == 1
    [received] = await read_topic(kafka.bootstrap, edge.topic)
    assert (received.key, received.envelope.type) == ("demo:order-service", CHANGE_MESSAGE)
    event = ChangeEvent.model_validate(received.envelope.payload)
    assert (event.environment, event.version, event.at) == ("prod", "v2.14.0", datetime(2026, 4, 29, 2, 31, tzinfo=UTC))


async def test_change_without_any_environment_is_422_naming_the_field(
    bus_env: str, redis, producer: BusProducer, redis_prefix: str
) -> None:
    edge = harness(environment=bus_env, redis=redis, publisher=producer, clock=FrozenClock(datetime.now(UTC)),
                   redis_prefix=redis_prefix, config=settings(default_environment=None))
    status, body = await post(edge, "/v1/sources/change/changes", [{"service": "a", "at": "2026-04-29T10:31:00Z"}],
                              bearer(CHANGE_TOKEN))
    assert status == 422
    assert body["errors"][0]["field"] == "body.0.environment"


def rate_limited_edge(bus_env: str, redis, producer: BusProducer, redis_prefix: str, clock: FrozenClock) -> Harness:
    return harness(environment=bus_env, redis=redis, publisher=producer, clock=clock, redis_prefix=redis_prefix,
                   config=settings(rate_limit_per_second=2))


async def test_over_the_rate_is_429_with_retry_after_and_the_alert_is_accepted_later(
    bus_env: str, redis, producer: BusProducer, redis_prefix: str, kafka: EmbeddedKafka
) -> None:
    clock = FrozenClock(datetime(2026, 4, 29, 10, 0, 0, 250000, tzinfo=UTC))
    edge = rate_limited_edge(bus_env, redis, producer, redis_prefix, clock)
    payload = fixture("alertmanager_payload.json")
    answers = [await post(edge, "/v1/sources/alertmanager/am", payload, bearer(AM_TOKEN)) for _ in range(2)]
    assert [status for status, _ in answers] == [202, 202]
    other = fixture("alertmanager_payload_resolved.json")
    async with edge.client() as client:
        refused = await client.post("/v1/sources/alertmanager/am", json=other, headers=bearer(AM_TOKEN))
    assert refused.status_code == 429
    assert refused.headers["retry-after"] == "1"
    assert refused.json()["errors"][0]["code"] == "rate_limited"
    clock.advance(timedelta(seconds=1))
    status, later = await post(edge, "/v1/sources/alertmanager/am", other, bearer(AM_TOKEN))
    assert (status, later["accepted"]) == (202, 1)  # the refused request left no dedupe mark behind
    assert len(await read_topic(kafka.bootstrap, edge.topic)) == 2
    assert metric(edge.metrics, "ira_source_requests_rejected_total", {"source": "am", "reason": "rate_limited"}) == 1


async def test_the_rate_holds_across_gateway_replicas(
    bus_env: str, redis, producer: BusProducer, redis_prefix: str
) -> None:
    clock = FrozenClock(datetime(2026, 4, 29, 10, 0, tzinfo=UTC))
    replicas = [rate_limited_edge(bus_env, redis, producer, redis_prefix, clock) for _ in range(2)]
    payload = fixture("alertmanager_payload.json")
    statuses = [(await post(replica, "/v1/sources/alertmanager/am", payload, bearer(AM_TOKEN)))[0]
                for replica in (replicas[0], replicas[1], replicas[0])]
    assert statuses == [202, 202, 429]


async def test_redis_unreachable_is_503_and_nothing_is_produced(
    bus_env: str, producer: BusProducer, redis_prefix: str, kafka: EmbeddedKafka
) -> None:
    unreachable = Redis.from_url(f"redis://127.0.0.1:{free_port()}/0", socket_connect_timeout=0.5)
    edge = harness(environment=bus_env, redis=unreachable, publisher=producer, clock=FrozenClock(datetime.now(UTC)),
                   redis_prefix=redis_prefix)
    try:
        async with edge.client() as client:
            response = await client.post("/v1/sources/alertmanager/am", json=fixture("alertmanager_payload.json"),
                                         headers=bearer(AM_TOKEN))
    finally:
        await unreachable.aclose()
    assert response.status_code == 503 and response.headers["retry-after"] == "1"
    assert response.json()["errors"][0]["code"] == "edge_unavailable"
    assert await read_topic(kafka.bootstrap, edge.topic) == []


async def test_rate_is_per_source_instance(bus_env: str, redis, producer: BusProducer, redis_prefix: str) -> None:
    clock = FrozenClock(datetime(2026, 4, 29, 10, 0, tzinfo=UTC))
    edge = rate_limited_edge(bus_env, redis, producer, redis_prefix, clock)
    for _ in range(2):
        assert (await post(edge, "/v1/sources/alertmanager/am", fixture("alertmanager_payload.json"),
                           bearer(AM_TOKEN)))[0] == 202
    status, _ = await post(edge, "/v1/sources/grafana/grafana", fixture("grafana_webhook_payload.json"),
                           bearer(GRAFANA_TOKEN))
    assert status == 202
