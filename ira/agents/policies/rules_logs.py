"""Logs rules: warning-and-worse lines in the incident window vs the baseline, grouped into
message templates; templates that are new, or recur and rose (by rate), become evidence.
A template whose lines name a cause (``log_causes``: no space left, x509, no such host, pool
timeouts, a dependency timing out...) becomes a hypothesis naming what the lines name (the
dependency, host or path) and when they started.

Log lines are data: a line that reads like an instruction is only ever counted and quoted.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

from ira.agents.binding import SAFE_SERVICE
from ira.agents.model import BranchTask, Conclusion, Observation, ToolProposal, Turn
from ira.agents.policies.analysis import count_templates, hm, shift_of, template_of
from ira.agents.policies.log_causes import CAUSES, cause_of, entity_of, statement
from ira.agents.policies.rules import evidence, observed
from ira.core.investigation import Evidence, Hypothesis
from ira.core.signals import LogResult

TOP = 6
GROWTH = 2.0


def planner(settings: Any):  # type: ignore[no-untyped-def]
    def plan(task: BranchTask, history: Sequence[Turn] = ()) -> list[ToolProposal]:
        b = task.binding
        if b.service is None or not SAFE_SERVICE.match(b.service):
            return []
        split = task.split_at.isoformat()
        common = {"service": b.service, "min_level": "warning", "text": None, "limit": settings.limit}
        return [
            ToolProposal(tool="logs.search", rationale="window",
                         args={**common, "start": split, "end": b.window_end.isoformat()}),
            ToolProposal(tool="logs.search", rationale="baseline",
                         args={**common, "start": b.window_start.isoformat(), "end": split}),
        ]

    return plan


def analyze(task: BranchTask, history: Sequence[Turn]) -> Conclusion:
    window = observed(history, "logs.search", "window")
    baseline = observed(history, "logs.search", "baseline")
    if not window:
        return Conclusion()
    turn, obs = window[-1]
    now = LogResult.model_validate(obs.data)
    before = LogResult.model_validate(baseline[-1][1].data) if baseline else None
    items = [_volume(task, (turn, obs), now, before=before)]
    items += _templates(task, (turn, obs), now, before=before)
    return Conclusion(evidence=tuple(items), hypotheses=tuple(_hypotheses(task, items[1:], now)))


def _volume(task: BranchTask, seen: tuple[int, Observation], now: LogResult, *, before: LogResult | None) -> Evidence:
    base = "unknown" if before is None else str(before.total_matched)
    summary = (f"{now.total_matched} warning/error lines of {task.binding.service} from {hm(now.query.start)} "
               f"to {hm(now.query.end)}, {base} in the baseline before")
    return evidence(task, seen, summary, index=0, data={
        "window": now.total_matched, "baseline": None if before is None else before.total_matched})


def _templates(task: BranchTask, seen: tuple[int, Observation], now: LogResult, *,
               before: LogResult | None) -> list[Evidence]:
    counts, examples = count_templates(now.lines)
    old, _ = count_templates(before.lines if before else ())
    scale = _span(now) / _span(before) if before and _span(before) > 0 else 1.0  # compare rates, not counts
    grown = [(t, n) for t, n in counts.most_common() if n >= GROWTH * max(old.get(t, 0) * scale, 0.5)]
    grown.sort(key=lambda tn: (cause_of(examples[tn[0]].message) is None, -tn[1]))  # cause-naming ones first
    firsts = _first_seen(now)
    onsets = _rise_onsets(task, now, before, keep={t for t, _ in grown[:TOP]})
    found = []
    for index, (template, n) in enumerate(grown[:TOP], start=1):
        example = examples[template]
        cause = cause_of(example.message)
        entity = entity_of(example.message, cause, dependencies=task.binding.dependencies) if cause else None
        novelty = "new since the baseline" if not old.get(template) else f"{old[template]} in the baseline"
        summary = f'{n} x [{example.level.value}] "{template}" ({novelty}, first at {hm(firsts[template])}); ' \
                  f'e.g. at {hm(example.at)}: "{example.message[:200]}"'
        found.append(evidence(task, seen, summary, index=index, data={
            "template": template, "window_count": n, "baseline_count": old.get(template, 0),
            "level": example.level.value, "example": example.message[:500], "cause": cause.name if cause else None,
            "entity": entity, "first_at": hm(firsts[template]), "new": not old.get(template),
            "onset": hm(onsets.get(template) or firsts[template]) if not old.get(template) or onsets.get(template)
            else None}))
    return found


def _first_seen(result: LogResult) -> dict[str, datetime]:
    firsts: dict[str, datetime] = {}
    for line in result.lines:
        key = template_of(line.message)
        firsts[key] = min(firsts.get(key, line.at), line.at)
    return firsts


def _rise_onsets(task: BranchTask, now: LogResult, before: LogResult | None, *, keep: set[str]
                 ) -> dict[str, datetime]:
    """When each template's rate rose: a change point on its lines per minute over the whole window
    (a failure that recurs through the baseline and then climbs gets the time it climbed)."""
    minutes: dict[str, Counter[datetime]] = {t: Counter() for t in keep}
    for line in (*now.lines, *(before.lines if before else ())):
        key = template_of(line.message)
        if key in minutes:
            minutes[key][line.at.replace(second=0, microsecond=0)] += 1
    start = task.binding.window_start.replace(second=0, microsecond=0)
    span = int((task.binding.window_end - start).total_seconds() // 60) + 1
    found = {}
    for key, counts in minutes.items():
        points = [(start + timedelta(minutes=m), float(counts[start + timedelta(minutes=m)])) for m in range(span)]
        shift = shift_of(points, task.split_at, factor=GROWTH, floor=1.0)
        if shift is not None and shift.jump_at is not None:
            found[key] = shift.jump_at
    return found


def _span(result: LogResult) -> float:
    return (result.query.end - result.query.start).total_seconds()


def _hypotheses(task: BranchTask, templates: list[Evidence], now: LogResult) -> list[Hypothesis]:
    """One hypothesis per (cause, entity) the templates name, citing every template that names it."""
    groups: dict[tuple[str, str | None], list[Evidence]] = {}
    for e in templates:
        if e.data.get("cause") and e.data.get("level") in ("error", "critical", "warning"):
            groups.setdefault((str(e.data["cause"]), e.data.get("entity")), []).append(e)  # type: ignore[arg-type]
    found = []
    service = task.binding.service or "the service"
    for (name, entity), cited in groups.items():
        cause = next(c for c in CAUSES if c.name == name)
        lines = sum(int(str(e.data["window_count"])) for e in cited)
        unverified = ("counts come from a capped sample of lines",) if now.partial else ()
        found.append(Hypothesis(statement=f"{statement(cause, service=service, entity=entity)} "
                                          f"(log lines from {min(str(e.data['first_at']) for e in cited)})",
                                confidence=round(min(cause.confidence + min(lines, 200) / 1000, 0.8), 2),
                                evidence_ids=tuple(e.evidence_id for e in cited), unverified=unverified))
    return sorted(found, key=lambda h: -h.confidence)
