"""With real Alertmanagers (and a real Prometheus) sending to ira over HTTP.

Prometheus scrapes a gauge we serve, its rule fires (``for: 0s``), Alertmanager posts the
webhook with its bearer token to ira served by uvicorn, and the alert lands on the topic;
flipping the gauge back brings the resolve as a second, distinct event. Two Alertmanagers
given the same alert (an HA pair whose gossip is off, so both notify) make one event.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest
from prometheus_client import CollectorRegistry, Gauge

from ira.core.alert import AlertEvent, AlertStatus
from ira.infra.tansu import EmbeddedKafka
from tests.eventually import eventually
from tests.observability import start_prometheus
from tests.sources.harness import AM_TOKEN, Harness, Received, metric, serving, watch_topic
from tests.sources.processes import serve_metrics, start_alertmanager

pytestmark = pytest.mark.slow


def alertmanager_config(ira_url: str) -> str:
    return f"""
route:
  receiver: ira
  group_by: [alertname]
  group_wait: 1s
  group_interval: 1s
  repeat_interval: 1h
receivers:
  - name: ira
    webhook_configs:
      - url: {ira_url}/v1/sources/alertmanager/am
        send_resolved: true
        http_config:
          authorization:
            type: Bearer
            credentials: {AM_TOKEN}
"""


def prometheus_config(target: str, alertmanager_url: str, rules: Path) -> str:
    return f"""
global:
  scrape_interval: 1s
  evaluation_interval: 1s
alerting:
  alertmanagers:
    - static_configs:
        - targets: ["{alertmanager_url.removeprefix('http://')}"]
rule_files: ["{rules}"]
scrape_configs:
  - job_name: checkout
    static_configs:
      - targets: ["{target}"]
"""


RULES = """
groups:
  - name: checkout
    rules:
      - alert: CheckoutBroken
        expr: ira_test_checkout_broken > 0
        for: 0s
        labels:
          severity: critical
          environment: staging
        annotations:
          summary: checkout is broken
"""


def events_with(received: list[Received], status: AlertStatus) -> list[AlertEvent]:
    found = [AlertEvent.model_validate(r.envelope.payload) for r in received]
    return [event for event in found if event.status == status]


async def test_prometheus_alert_fires_and_resolves_through_alertmanager_as_two_events(
    tmp_path: Path, edge: Harness, kafka: EmbeddedKafka
) -> None:
    rules = tmp_path / "rules.yml"
    rules.write_text(RULES)
    registry = CollectorRegistry()
    broken = Gauge("ira_test_checkout_broken", "1 while checkout is broken", registry=registry)
    broken.set(1)
    with serve_metrics(registry) as target:
        async with serving(edge.app) as ira_url, watch_topic(kafka.bootstrap, edge.topic) as received, \
                start_alertmanager(tmp_path, alertmanager_config(ira_url)) as am_url, \
                start_prometheus(tmp_path, prometheus_config(target, am_url, rules)):
            [firing] = await eventually(lambda: events_with(received, AlertStatus.FIRING), timeout=60, interval=0.2)
            broken.set(0)
            [resolved] = await eventually(lambda: events_with(received, AlertStatus.RESOLVED), timeout=60,
                                          interval=0.2)
    assert len(received) == 2
    assert firing.event_id != resolved.event_id
    assert firing.fingerprint == resolved.fingerprint
    assert (firing.name, firing.severity, firing.environment, firing.service) == (
        "CheckoutBroken", "critical", "staging", "checkout")
    assert firing.annotations == {"summary": "checkout is broken"}
    assert "/graph?g0.expr=ira_test_checkout_broken" in (firing.generator_url or "")
    assert resolved.starts_at == firing.starts_at and resolved.ends_at is not None
    assert received[0].key == f"demo:{firing.fingerprint}"


def api_alert(starts_at: datetime, ends_at: datetime | None = None) -> list[dict[str, object]]:
    """One alert as Prometheus posts it to ``/api/v2/alerts`` (with its own startsAt)."""
    alert: dict[str, object] = {
        "labels": {"alertname": "OrderLatencyHigh", "service": "order-service", "severity": "warning"},
        "annotations": {"summary": "p95 above 1s"}, "startsAt": starts_at.isoformat(),
        "generatorURL": "http://prometheus.test/graph?g0.expr=latency",
    }
    if ends_at is not None:
        alert["endsAt"] = ends_at.isoformat()
    return [alert]


async def post_to_both(urls: tuple[str, str], alerts: list[dict[str, object]]) -> None:
    async with httpx.AsyncClient(timeout=5) as client:
        for url in urls:
            (await client.post(f"{url}/api/v2/alerts", json=alerts)).raise_for_status()


def answered(edge: Harness, *, accepted: int, duplicates: int) -> bool:
    counts = (metric(edge.metrics, "ira_source_events_accepted_total", {"source": "am"}),
              metric(edge.metrics, "ira_source_events_duplicate_total", {"source": "am"}))
    assert counts[0] <= accepted and counts[1] <= duplicates, counts  # never more than one event per state
    return counts == (accepted, duplicates)


async def test_an_alertmanager_ha_pair_notifying_twice_makes_one_event_per_state(
    tmp_path: Path, edge: Harness, kafka: EmbeddedKafka
) -> None:
    starts_at = datetime.now(UTC).replace(microsecond=0) - timedelta(seconds=5)
    async with serving(edge.app) as ira_url, watch_topic(kafka.bootstrap, edge.topic) as received, \
            start_alertmanager(tmp_path, alertmanager_config(ira_url), name="am-a") as am_a, \
            start_alertmanager(tmp_path, alertmanager_config(ira_url), name="am-b") as am_b:
        await post_to_both((am_a, am_b), api_alert(starts_at))
        await eventually(lambda: answered(edge, accepted=1, duplicates=1), timeout=60, interval=0.2)
        await post_to_both((am_a, am_b), api_alert(starts_at, ends_at=datetime.now(UTC)))
        await eventually(lambda: answered(edge, accepted=2, duplicates=2), timeout=60, interval=0.2)
        await eventually(lambda: len(received) >= 2, timeout=10)
    [firing] = events_with(received, AlertStatus.FIRING)
    [resolved] = events_with(received, AlertStatus.RESOLVED)
    assert firing.fingerprint == resolved.fingerprint and firing.event_id != resolved.event_id
    assert firing.starts_at == starts_at
