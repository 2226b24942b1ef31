"""The signals the metrics rules know, by method rather than by service: RED for the service
(rate, errors, duration) and USE for its resources (CPU, memory, restarts/OOM kills, disk,
file descriptors, connection pools), for the service and for each declared dependency.

A signal is asked for only when the Prometheus at hand has every metric it needs (the
discovery query ``count by (__name__) ({service="<s>"})`` says which), and the first variant
of a family that fits wins (``container_*`` before ``process_*``), so one catalog serves a
Kubernetes service, a VM process and a database exporter alike. Pure: no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass
from string import Template


@dataclass(frozen=True)
class Signal:
    """One way to measure one property of a service in PromQL."""

    family: str
    """What it measures: ``latency``, ``errors``, ``traffic``, ``cpu``, ``memory``, ``restarts``, ``oom``,
    ``disk``, ``fds``, ``pool``, ``connections``, ``throttling``."""
    needs: tuple[str, ...]
    """Metric names the service must have."""
    template: str
    """PromQL with ``$service`` and ``$rate``."""
    label: str
    """How evidence names it: ``memory working set``."""
    unit: str = ""
    """``ratio`` (0..1, saturated at ``saturated_at``), ``s``, ``bytes``, ``cores``, ``count``, ``/s``."""
    saturated_at: float | None = None

    def render(self, service: str, rate: str) -> str:
        return Template(self.template).substitute(service=service, rate=rate)


def _s(family: str, needs: str, template: str, label: str, unit: str = "", saturated_at: float | None = None) -> Signal:
    return Signal(family, tuple(needs.split()), template, label, unit, saturated_at)


CATALOG: tuple[Signal, ...] = (
    _s("cpu", "container_cpu_usage_seconds_total container_spec_cpu_quota container_spec_cpu_period",
       'sum(rate(container_cpu_usage_seconds_total{service="$service"}[$rate])) / '
       'sum(container_spec_cpu_quota{service="$service"} / container_spec_cpu_period{service="$service"})',
       "CPU use of its limit", "ratio", 0.9),
    _s("cpu", "process_cpu_seconds_total", 'sum(rate(process_cpu_seconds_total{service="$service"}[$rate]))',
       "CPU use", "cores"),
    _s("throttling", "container_cpu_cfs_throttled_periods_total container_cpu_cfs_periods_total",
       'sum(rate(container_cpu_cfs_throttled_periods_total{service="$service"}[$rate])) / '
       'sum(rate(container_cpu_cfs_periods_total{service="$service"}[$rate]))', "CPU throttling", "ratio", 0.5),
    _s("memory", "container_memory_working_set_bytes container_spec_memory_limit_bytes",
       'max(container_memory_working_set_bytes{service="$service"} / '
       'container_spec_memory_limit_bytes{service="$service"})', "memory working set of its limit", "ratio", 0.9),
    _s("memory", "process_resident_memory_bytes", 'max(process_resident_memory_bytes{service="$service"})',
       "resident memory", "bytes"),
    _s("restarts", "kube_pod_container_status_restarts_total",
       'sum(kube_pod_container_status_restarts_total{service="$service"})', "container restarts", "count"),
    _s("oom", "container_oom_events_total", 'sum(container_oom_events_total{service="$service"})',
       "OOM kills", "count"),
    _s("disk", "node_filesystem_avail_bytes node_filesystem_size_bytes",
       'max(1 - node_filesystem_avail_bytes{service="$service"} / node_filesystem_size_bytes{service="$service"})',
       "disk used", "ratio", 0.95),
    _s("fds", "process_open_fds process_max_fds",
       'max(process_open_fds{service="$service"} / process_max_fds{service="$service"})',
       "open file descriptors of the limit", "ratio", 0.9),
    _s("pool", "db_pool_connections_in_use db_pool_connections_max",
       'max(db_pool_connections_in_use{service="$service"} / db_pool_connections_max{service="$service"})',
       "DB pool saturation", "ratio", 0.9),
    _s("pool", "hikaricp_connections_active hikaricp_connections_max",
       'max(hikaricp_connections_active{service="$service"} / hikaricp_connections_max{service="$service"})',
       "connection pool saturation", "ratio", 0.9),
    _s("connections", "pg_stat_activity_count pg_settings_max_connections",
       'sum(pg_stat_activity_count{service="$service"}) / max(pg_settings_max_connections{service="$service"})',
       "database connections of max_connections", "ratio", 0.9),
    _s("latency", "pg_stat_statements_mean_exec_time_seconds",
       'max(pg_stat_statements_mean_exec_time_seconds{service="$service"})', "mean query time", "s"),
    _s("traffic", "http_requests_total", 'sum(rate(http_requests_total{service="$service"}[$rate]))',
       "request rate", "/s"),
)
"""USE and extra RED signals; the service's p95/p99 latency, error ratio and version come from the
configured queries (``agents.metrics.queries``)."""

DISCOVERY = 'count by (__name__) ({service="$service"})'
"""Which metric names a service has: one series per name."""


def available(names: frozenset[str]) -> list[Signal]:
    """The catalog's signals ``names`` can answer, the first variant of each family only."""
    chosen: dict[str, Signal] = {}
    for signal in CATALOG:
        if signal.family not in chosen and set(signal.needs) <= names:
            chosen[signal.family] = signal
    return list(chosen.values())
