"""Metrics rules: RED of the service, USE of its resources and of its declared dependencies,
and its deploys and config changes over the change look-back, lined up in time.

The plan grows with what Prometheus has: the configured queries (p95/p99 latency, error
ratio, DB pool, version) first, then one discovery query per service (which metric names it
has), then each catalog signal (:mod:`signals`) those names can answer. Every query stays in
the binding's label scope (the service, or a declared dependency); the plan depends only on
the binding, the configuration and the metric *names* Prometheus reported, never on text
read from an observation.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from string import Template
from typing import Any

from ira.agents.binding import SAFE_SERVICE
from ira.agents.model import BranchTask, Conclusion, ToolProposal, Turn
from ira.agents.policies.metric_evidence import Found, changes_of, signal_of, versions_of
from ira.agents.policies.rules import observed
from ira.agents.policies.signals import CATALOG, DISCOVERY, Signal, available
from ira.core.investigation import Evidence, Hypothesis
from ira.core.signals import MetricResult

CONFIGURED: dict[str, Signal] = {
    "latency_p95": Signal("latency", (), "", "p95 latency", "s"),
    "latency_p99": Signal("latency_p99", (), "", "p99 latency", "s"),
    "error_ratio": Signal("errors", (), "", "error ratio", "ratio"),
    "saturation": Signal("pool", (), "", "DB pool saturation", "ratio", 0.9),
}
DEPENDENCY_QUERIES = ("latency_p95", "error_ratio")
MAX_SIGNALS = 8
MAX_DEPENDENCY_SIGNALS = 4
DEPLOY_LEAD = timedelta(minutes=30)
"""A deploy up to this long before the jump counts as preceding it."""
LATENCY_RATIO = 1.5


def _iso(at: datetime) -> str:
    return at.isoformat()


def planner(settings: Any):  # type: ignore[no-untyped-def]
    def plan(task: BranchTask, history: Sequence[Turn] = ()) -> list[ToolProposal]:
        b = task.binding
        if b.service is None or not SAFE_SERVICE.match(b.service):
            return []
        span = b.window_end - b.window_start
        step = max(1, round(span.total_seconds() / 120))
        rate = f"{int(min(max(settings.min_rate_window.total_seconds(), 4 * step), span.total_seconds()))}s"
        window = {"start": _iso(b.window_start), "end": _iso(b.window_end), "step_seconds": float(step)}
        since = min(b.changes_since or b.window_start, b.window_start)
        found = [ToolProposal(tool="deployments.list", rationale="changes",
                              args={"service": b.service, "start": _iso(since), "end": _iso(b.window_end)})]
        for service in b.services:
            if SAFE_SERVICE.match(service):
                found += _service_plan(task, history, settings, service, rate=rate, window=window)
        return found

    return plan


def _service_plan(task: BranchTask, history: Sequence[Turn], settings: Any, service: str, *, rate: str,
                  window: dict[str, Any]) -> list[ToolProposal]:
    own = service == task.binding.service
    names = ("latency_p95", "latency_p99", "error_ratio", "saturation", "version") if own else DEPENDENCY_QUERIES
    queries = {Template(getattr(settings.queries, n)).substitute(service=service, rate=rate): n for n in names}
    found = [ToolProposal(tool="prometheus.query_range", rationale=f"{service}|{n}", args={"query": q, **window})
             for q, n in queries.items()]
    discovery = Template(DISCOVERY).substitute(service=service)
    found.append(ToolProposal(tool="prometheus.query", rationale=f"{service}|discover",
                              args={"query": discovery, "at": window["end"]}))
    signals = available(_discovered(history, service))[: MAX_SIGNALS if own else MAX_DEPENDENCY_SIGNALS]
    for signal in signals:
        query = signal.render(service, rate)
        if query not in queries:
            found.append(ToolProposal(tool="prometheus.query_range", rationale=f"{service}|#{CATALOG.index(signal)}",
                                      args={"query": query, **window}))
    return found


def _discovered(history: Sequence[Turn], service: str) -> frozenset[str]:
    names: set[str] = set()
    for _, obs in observed(history, "prometheus.query", f"{service}|discover"):
        names |= {s.labels.get("__name__", "") for s in MetricResult.model_validate(obs.data).series}
    return frozenset(names)


def resolve(key: str) -> Signal | None:
    """The signal a planned query measures: a configured one by name, a catalog one by ``#index``."""
    if key.startswith("#") and key[1:].isdigit() and int(key[1:]) < len(CATALOG):
        return CATALOG[int(key[1:])]
    return CONFIGURED.get(key)


def analyze(task: BranchTask, history: Sequence[Turn]) -> Conclusion:
    found: dict[str, Found] = {}
    for turn in history:
        d = turn.decision
        rationale = getattr(d, "rationale", "")
        if getattr(d, "tool", None) != "prometheus.query_range" or "|" not in rationale:
            continue
        service, key = rationale.split("|", 1)
        signal = resolve(key)
        if signal is not None and turn.observation is not None and turn.observation.ok:
            item = signal_of(task, (turn.turn, turn.observation), signal, service=service,
                             name=key if key in CONFIGURED else None)
            if item is not None:
                found[f"{service}|{signal.family}"] = item
    items = [f[1] for f in found.values()] + versions_of(task, history)
    changes = changes_of(task, history)
    items += [e for _, e in changes]
    return Conclusion(evidence=tuple(items), hypotheses=tuple(_hypotheses(task, found, changes)))


def _hypotheses(task: BranchTask, found: dict[str, Found], changes: list[tuple[datetime, Evidence]]
                ) -> list[Hypothesis]:
    service = task.binding.service
    latency, errors = found.get(f"{service}|latency"), found.get(f"{service}|errors")
    regressed = latency if latency and latency[1].data.get("abnormal") and latency[0].ratio >= LATENCY_RATIO else None
    saturated = [f for f in found.values() if f[1].data.get("saturated")]
    support = [f[1].evidence_id for f in (*saturated, errors) if f is not None and f[1].data.get("abnormal")]
    mechanism = any(f[1].data["service"] == service for f in saturated)
    hypotheses = [Hypothesis(statement=f"{f[1].data['label']} of {f[1].data['service']} saturated "
                                       f"({f[1].data['peak_text']}) during the incident",
                             confidence=0.5, evidence_ids=(f[1].evidence_id,),
                             unverified=("why it saturates is not established by metrics alone",)) for f in saturated]
    if regressed is not None:
        hypotheses.insert(0, _regression(task, regressed, changes, support=support, saturated=mechanism))
    return hypotheses


def _regression(task: BranchTask, latency: Found, changes: list[tuple[datetime, Evidence]], *,
                support: list[str], saturated: bool) -> Hypothesis:
    """A latency jump: blamed on the latest deploy shortly before it, or on nothing recorded."""
    jump, service = latency[0].jump_at, task.binding.service
    assert jump is not None
    deploys = [(at, e) for at, e in changes if e.data.get("kind") == "deploy"]
    preceding = [(at, e) for at, e in deploys if jump - DEPLOY_LEAD <= at <= jump + timedelta(minutes=1)]
    if not preceding:
        return Hypothesis(statement=f"{service} latency regressed at {latency[1].data['onset']} with no recorded "
                                    "deploy shortly before it", confidence=0.3,
                          evidence_ids=(latency[1].evidence_id, *support),
                          unverified=("changes outside ira's change events are unknown",))
    at, deploy = max(preceding, key=lambda p: p[0])
    version = deploy.data.get("version") or "a new version"
    confidence = 0.5 + (0.15 if saturated else 0) + (0.1 if support else 0)
    return Hypothesis(
        statement=f"The deploy of {service} {version} at {deploy.data['at']} introduced the latency regression "
                  f"(p95 x{latency[0].ratio:.1f} from {latency[1].data['onset']})",
        confidence=round(min(confidence, 0.75), 2), evidence_ids=(deploy.evidence_id, latency[1].evidence_id, *support),
        unverified=("the deploy precedes the jump in time; causation was not tested",))
