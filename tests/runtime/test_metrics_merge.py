"""``ira dev``'s ``/metrics`` with roles in child processes: one exposition, families merged."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from ira.runtime.metrics_merge import merged


def registry(accepted: float, lag: dict[str, float]) -> CollectorRegistry:
    r = CollectorRegistry()
    Counter("ira_accepted", "Accepted", ["source"], registry=r).labels(source="am").inc(accepted)
    gauge = Gauge("ira_consumer_lag_messages", "Lag", ["consumer"], registry=r)
    for consumer, value in lag.items():
        gauge.labels(consumer=consumer).set(value)
    return r


def test_counters_add_up_and_each_consumers_gauge_comes_from_its_process() -> None:
    main = registry(3, {"coordinator": 2})
    child = generate_latest(registry(4, {"triage": 7})).decode()

    text = merged(main, [child]).decode()

    samples = {(s.name, tuple(sorted(s.labels.items()))): s.value
               for family in text_string_to_metric_families(text) for s in family.samples}
    assert samples[("ira_accepted_total", (("source", "am"),))] == 7
    assert samples[("ira_consumer_lag_messages", (("consumer", "coordinator"),))] == 2
    assert samples[("ira_consumer_lag_messages", (("consumer", "triage"),))] == 7
    assert text.count("# TYPE ira_consumer_lag_messages gauge") == 1  # one family, not one per process
    assert text.count("# TYPE ira_accepted_total counter") == 1


def test_without_children_it_is_the_process_own_exposition() -> None:
    main = registry(1, {"triage": 0})
    assert merged(main, []) == generate_latest(main)
