"""What an operator watches on the ingest edge: how much came in, how much was dropped, why,
and how long a sender waited for its 202 (POST -> every event acknowledged by the broker).

The ``source`` label is a configured source id, never the raw URL segment: an unknown
source is counted as ``unknown`` so strangers cannot grow the label set.
"""

from __future__ import annotations

from typing import Any, ClassVar
from weakref import WeakKeyDictionary

from prometheus_client import CollectorRegistry, Counter, Histogram

UNKNOWN_SOURCE = "unknown"
LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


class SourceMetrics:
    """The sources' counters and latency histogram on the process's registry.

    Get them with :meth:`on`: one set per registry, so building the router twice on one
    platform (two apps in a test, a second ``routers()`` call) shares the series instead of
    failing with prometheus_client's DuplicateTimeseries.
    """

    _by_registry: ClassVar[WeakKeyDictionary[CollectorRegistry, SourceMetrics]] = WeakKeyDictionary()

    @classmethod
    def on(cls, registry: CollectorRegistry) -> SourceMetrics:
        found = cls._by_registry.get(registry)
        if found is None:
            found = cls._by_registry[registry] = cls(registry)
        return found

    def __init__(self, registry: CollectorRegistry) -> None:
        self._accepted = Counter("ira_source_events_accepted", "Events accepted and acknowledged by the broker",
                                 ["source"], registry=registry)
        self._duplicates = Counter("ira_source_events_duplicate", "Events dropped by the edge dedupe window",
                                   ["source"], registry=registry)
        self._rejected = Counter("ira_source_requests_rejected", "Requests refused, by reason (error code)",
                                 ["source", "reason"], registry=registry)
        self._latency = Histogram("ira_source_ingest_seconds", "POST received -> 202 (every event acknowledged)",
                                  ["source"], buckets=LATENCY_BUCKETS, registry=registry)
        self._by_source: dict[str, tuple[Any, Any, Any]] = {}

    def accepted(self, source: str, *, events: int, duplicates: int, seconds: float) -> None:
        accepted, duplicate, latency = self._children(source)
        if events:
            accepted.inc(events)
        if duplicates:
            duplicate.inc(duplicates)
        latency.observe(seconds)

    def _children(self, source: str) -> tuple[Any, Any, Any]:
        """The per-source series, looked up once per source instead of on every request."""
        found = self._by_source.get(source)
        if found is None:
            found = (self._accepted.labels(source), self._duplicates.labels(source), self._latency.labels(source))
            self._by_source[source] = found
        return found

    def rejected(self, source: str, reason: str) -> None:
        self._rejected.labels(source, reason).inc()
