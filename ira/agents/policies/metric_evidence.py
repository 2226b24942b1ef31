"""Evidence from metric and change observations: what moved, from when, and what changed.

Each item carries structured ``data`` (service, signal family, baseline, peak, onset,
abnormal, saturated; change kind, time, description) so the coordinator's synthesis can line
up evidence of several branches in time without re-reading summaries. An empty change list is
evidence too: "no deploy or config change of S since T" is stated as a fact.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from ira.agents.model import BranchTask, Observation, Turn
from ira.agents.policies.analysis import Shift, hm, pct, shift_of
from ira.agents.policies.rules import evidence, observed
from ira.agents.policies.signals import Signal
from ira.core.investigation import Evidence
from ira.core.signals import ChangeResult, MetricResult

Found = tuple[Shift, Evidence]
COUNTERS = frozenset({"restarts", "oom"})
RATIO_RISE = 0.15
"""A ratio signal (0..1) moved when it rose by this much, or crossed its saturation level."""
ONSET_RISE = 0.05
"""...and its onset is when it first rose this much above where the window started (a ramp's start)."""


def _fmt(signal: Signal, value: float) -> str:
    if signal.unit == "ratio":
        return pct(value)
    if signal.unit == "bytes":
        return f"{value / 2**20:.0f} MiB"
    if signal.unit == "s":
        return f"{value:.3f} s"
    return f"{value:.3g}{' ' + signal.unit if signal.unit and signal.unit != 'count' else ''}"


def signal_of(task: BranchTask, seen: tuple[int, Observation], signal: Signal, *, service: str,
              name: str | None = None) -> Found | None:
    """Evidence of how ``signal`` of ``service`` moved; ``name`` is the configured query's name, if any."""
    result = MetricResult.model_validate(seen[1].data)
    points = result.series[0].points if result.series else ()
    if signal.family in COUNTERS:
        return _counter(task, seen, signal, service=service, points=points, name=name)
    floor = 0.01 if signal.family == "errors" else ONSET_RISE if signal.unit == "ratio" else 0.0
    factor = 1.0 if signal.unit == "ratio" and signal.family != "errors" else 1.5  # ratios move in absolute terms
    shift = shift_of(points, task.split_at, factor=factor, floor=floor) if points else None
    if shift is None:
        return None
    saturated = signal.saturated_at is not None and shift.peak >= signal.saturated_at > shift.baseline
    abnormal = shift.jump_at is not None and (saturated or _moved(signal, shift))
    role = "" if service == task.binding.service else f" (dependency of {task.binding.service})"
    moved = (f"rose from {_fmt(signal, shift.baseline)} to {_fmt(signal, shift.peak)}" if abnormal else
             f"stayed near {_fmt(signal, shift.baseline)} (peak {_fmt(signal, shift.peak)})")
    onset = f"; first left its baseline at {hm(shift.jump_at)}" if abnormal else ""
    summary = f"{signal.label} of {service}{role} {moved} (baseline before {hm(task.split_at)}){onset}"
    data = {"signal": name or signal.family, "family": signal.family, "label": signal.label, "service": service,
            "unit": signal.unit, "baseline": shift.baseline, "peak": shift.peak, "peak_text": _fmt(signal, shift.peak),
            "ratio": None if shift.ratio == float("inf") else round(shift.ratio, 2),
            "onset": hm(shift.jump_at) if abnormal else None, "abnormal": abnormal, "saturated": saturated}
    return shift, evidence(task, seen, summary, index=1, data=data)


def _moved(signal: Signal, shift: Shift) -> bool:
    if signal.family == "errors":
        return shift.peak >= max(2 * shift.baseline, shift.baseline + 0.01)
    if signal.unit == "ratio":
        return shift.peak - shift.baseline >= RATIO_RISE
    return shift.ratio >= 1.5


def _counter(task: BranchTask, seen: tuple[int, Observation], signal: Signal, *, service: str,
             points: Sequence[tuple[datetime, float]], name: str | None) -> Found | None:
    if not points:
        return None
    first = points[0][1]
    grew = [(t, v) for t, v in points if v > first]
    count = points[-1][1] - first
    onset = grew[0][0] if grew else None
    summary = (f"{int(count)} {signal.label} of {service} in the window, the first at {hm(onset)}" if grew else
               f"no {signal.label} of {service} in the window")
    shift = Shift(baseline=first, peak=points[-1][1], last=points[-1][1], jump_at=onset)
    data = {"signal": name or signal.family, "family": signal.family, "label": signal.label, "service": service,
            "unit": signal.unit, "baseline": first, "peak": points[-1][1], "peak_text": f"{int(count)}", "count": count,
            "onset": hm(onset) if grew else None, "abnormal": bool(grew), "saturated": False}
    return shift, evidence(task, seen, summary, index=1, data=data)


def versions_of(task: BranchTask, history: Sequence[Turn]) -> list[Evidence]:
    found = []
    for turn, obs in observed(history, "prometheus.query_range", f"{task.binding.service}|version"):
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


def changes_of(task: BranchTask, history: Sequence[Turn]) -> list[tuple[datetime, Evidence]]:
    found = []
    for turn, obs in observed(history, "deployments.list"):
        result = ChangeResult.model_validate(obs.data)
        for i, change in enumerate(result.changes, start=1):
            kind = "deploy" if change.version or change.commit else "config change"
            who = f" by {change.actor}" if change.actor else ""
            commit = f" (commit {change.commit})" if change.commit else ""
            what = f": {change.description}" if change.description else ""
            summary = f"{kind} of {change.service} {change.version or ''}{commit}{who} at {hm(change.at)}{what}"
            data = {"kind": kind, "service": change.service, "version": change.version, "at": hm(change.at),
                    "commit": change.commit, "url": change.url, "description": (change.description or "")[:300]}
            found.append((change.at, evidence(task, (turn, obs), " ".join(summary.split()), index=i, data=data)))
        if not result.changes:
            hours = (result.query.end - result.query.start).total_seconds() / 3600
            summary = (f"no deploy or config change of {result.query.service} recorded in the last {hours:.0f} h "
                       f"(since {hm(result.query.start)})")
            found.append((result.query.end, evidence(task, (turn, obs), summary, index=0, data={
                "kind": "none", "service": result.query.service, "since": hm(result.query.start)})))
    return found
