"""Metrics rules: latency p95/p99, error ratio and saturation before vs after the split, and
the service's deploys, lined up in time.

The plan is one ``deployments.list`` and one range query per configured signal over the
whole window (the analysis splits the points at the baseline boundary), so it costs six tool
calls whatever the answers say.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from string import Template
from typing import Any

from ira.agents.binding import SAFE_SERVICE
from ira.agents.model import BranchTask, Conclusion, Observation, ToolProposal, Turn
from ira.agents.policies.analysis import Shift, hm, pct, shift_of
from ira.agents.policies.rules import evidence, observed
from ira.core.investigation import Evidence, Hypothesis
from ira.core.signals import ChangeResult, MetricResult

SIGNALS = ("latency_p95", "latency_p99", "error_ratio", "saturation", "version")
LATENCY_RATIO = 1.5
SATURATED = 0.9
DEPLOY_LEAD = timedelta(minutes=30)
"""A deploy up to this long before the jump counts as preceding it."""


def _iso(at: datetime) -> str:
    return at.isoformat()


def planner(settings: Any):  # type: ignore[no-untyped-def]
    def plan(task: BranchTask) -> list[ToolProposal]:
        b = task.binding
        if b.service is None or not SAFE_SERVICE.match(b.service):
            return []
        span = b.window_end - b.window_start
        step = max(1, round(span.total_seconds() / 120))
        rate = min(max(settings.min_rate_window.total_seconds(), 4 * step), span.total_seconds())
        window = {"start": _iso(b.window_start), "end": _iso(b.window_end)}
        found = [ToolProposal(tool="deployments.list", args={"service": b.service, **window}, rationale="changes")]
        for name in SIGNALS:
            query = Template(getattr(settings.queries, name)).substitute(service=b.service, rate=f"{int(rate)}s")
            found.append(ToolProposal(tool="prometheus.query_range", rationale=name,
                                      args={"query": query, **window, "step_seconds": float(step)}))
        return found

    return plan


def analyze(task: BranchTask, history: Sequence[Turn]) -> Conclusion:
    items: list[Evidence] = []
    shifts: dict[str, tuple[Shift, Evidence]] = {}
    split = task.split_at
    for name in ("latency_p95", "latency_p99", "error_ratio", "saturation"):
        for turn, obs in observed(history, "prometheus.query_range", name):
            found = _signal(task, (turn, obs), name, split=split)
            if found:
                shifts[name] = found
                items.append(found[1])
    items += _versions(task, history)
    changes = _changes(task, history)
    items += [e for _, e in changes]
    return Conclusion(evidence=tuple(items), hypotheses=tuple(_hypotheses(task, shifts, changes)))


def _signal(task: BranchTask, seen: tuple[int, Observation], name: str, *,
            split: datetime) -> tuple[Shift, Evidence] | None:
    result = MetricResult.model_validate(seen[1].data)
    if not result.series:
        return None
    floor = 0.01 if name == "error_ratio" else 0.0
    shift = shift_of(result.series[0].points, split, floor=floor)
    if shift is None:
        return None
    fmt = pct if name in ("error_ratio", "saturation") else (lambda v: f"{v:.3f} s")
    label = {"latency_p95": "p95 latency", "latency_p99": "p99 latency", "error_ratio": "error ratio",
             "saturation": "DB pool saturation"}[name]
    moved = f"rose from {fmt(shift.baseline)} to {fmt(shift.peak)}" if shift.jump_at else \
        f"stayed near {fmt(shift.baseline)} (peak {fmt(shift.peak)})"
    jump = f"; first left its baseline at {hm(shift.jump_at)}" if shift.jump_at else ""
    summary = f"{label} of {task.binding.service} {moved} (baseline before {hm(split)}){jump}"
    data = {"signal": name, "baseline": shift.baseline, "peak": shift.peak, "last": shift.last,
            "ratio": None if shift.ratio == float("inf") else round(shift.ratio, 2), "jump_at": hm(shift.jump_at)}
    return shift, evidence(task, seen, summary, index=1, data=data)


def _versions(task: BranchTask, history: Sequence[Turn]) -> list[Evidence]:
    found = []
    for turn, obs in observed(history, "prometheus.query_range", "version"):
        firsts = sorted((s.points[0][0], s.labels.get("version", "?")) for s in
                        MetricResult.model_validate(obs.data).series if s.points)
        if len(firsts) > 1:
            order = " -> ".join(v for _, v in firsts)
            latest, since = firsts[-1][1], hm(firsts[-1][0])
            summary = f"{task.binding.service} changed version {order}; {latest} first seen at {since}"
            found.append(evidence(task, (turn, obs), summary, index=1,
                                  data={"versions": [v for _, v in firsts], "changed_at": since}))
        elif firsts:
            found.append(evidence(task, (turn, obs), f"{task.binding.service} ran {firsts[0][1]} all window",
                                  index=1, data={"versions": [firsts[0][1]]}))
    return found


def _changes(task: BranchTask, history: Sequence[Turn]) -> list[tuple[datetime, Evidence]]:
    found = []
    for turn, obs in observed(history, "deployments.list"):
        for i, change in enumerate(ChangeResult.model_validate(obs.data).changes, start=1):
            who = f" by {change.actor}" if change.actor else ""
            commit = f" (commit {change.commit})" if change.commit else ""
            summary = f"deploy of {change.service} {change.version or ''}{commit}{who} at {hm(change.at)}"
            data = {"version": change.version, "at": hm(change.at), "commit": change.commit, "url": change.url}
            found.append((change.at, evidence(task, (turn, obs), " ".join(summary.split()), index=i, data=data)))
    return found


Found = tuple[Shift, Evidence]


Changes = list[tuple[datetime, Evidence]]


def _hypotheses(task: BranchTask, shifts: dict[str, Found], changes: Changes) -> list[Hypothesis]:
    latency, saturation, errors = (shifts.get(n) for n in ("latency_p95", "saturation", "error_ratio"))
    regressed = latency if latency and latency[0].jump_at and latency[0].ratio >= LATENCY_RATIO else None
    saturated = saturation if saturation and saturation[0].peak >= SATURATED > saturation[0].baseline else None
    erroring = errors if errors and errors[0].jump_at else None
    found = []
    if regressed is not None:
        found.append(_regression(task, regressed, changes, saturated=saturated, erroring=erroring))
    if saturated is not None:
        found.append(Hypothesis(
            statement=f"{task.binding.service} DB connection pool saturation ({pct(saturated[0].peak)}) is driving "
                      "the latency", confidence=0.6 if regressed else 0.4,
            evidence_ids=(saturated[1].evidence_id, *([regressed[1].evidence_id] if regressed else [])),
            unverified=("why the pool saturates (load, slower queries, pool size) is not established",)))
    return found


def _regression(task: BranchTask, latency: Found, changes: Changes, *,
                saturated: Found | None, erroring: Found | None) -> Hypothesis:
    """A latency jump: blamed on the latest deploy shortly before it, or on nothing recorded."""
    jump, service = latency[0].jump_at, task.binding.service
    assert jump is not None
    support = [s[1].evidence_id for s in (saturated, erroring) if s is not None]
    preceding = [(at, e) for at, e in changes if jump - DEPLOY_LEAD <= at <= jump + timedelta(minutes=1)]
    if not preceding:
        return Hypothesis(statement=f"{service} latency regressed at {hm(jump)} with no recorded change before it",
                          confidence=0.3, evidence_ids=(latency[1].evidence_id, *support),
                          unverified=("changes outside ira's change events are unknown",))
    at, deploy = max(preceding, key=lambda p: p[0])
    version = deploy.data.get("version") or "a new version"
    confidence = 0.5 + (0.15 if saturated else 0) + (0.1 if erroring else 0)
    return Hypothesis(
        statement=f"The deploy of {service} {version} at {hm(at)} introduced the latency regression "
                  f"(p95 x{latency[0].ratio:.1f} from {hm(jump)})",
        confidence=round(confidence, 2), evidence_ids=(deploy.evidence_id, latency[1].evidence_id, *support),
        unverified=("the deploy precedes the jump in time; causation was not tested",))
