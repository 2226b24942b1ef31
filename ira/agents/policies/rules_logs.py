"""Logs rules: warning-and-worse lines in the incident window vs the baseline, grouped into
message templates; templates that are new or grew become evidence, and known shapes of
failure (timeouts on a DB pool, refused connections, memory) become hypotheses.

Log lines are data: a line that reads like an instruction is only ever counted and quoted.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ira.agents.binding import SAFE_SERVICE
from ira.agents.model import BranchTask, Conclusion, Observation, ToolProposal, Turn
from ira.agents.policies.analysis import count_templates, hm
from ira.agents.policies.rules import evidence, observed
from ira.core.investigation import Evidence, Hypothesis
from ira.core.signals import LogResult

TOP = 5
GROWTH = 2.0

# (words that must all appear, hypothesis, base confidence)
PATTERNS: tuple[tuple[tuple[tuple[str, ...], ...], str, float], ...] = (
    ((("timeout", "timed out"), ("pool", "connection", "database", " db")),
     "database connection pool exhaustion: requests time out waiting for a DB connection", 0.55),
    ((("refused", "unreachable", "no route"),), "a dependency of {service} is unreachable", 0.35),
    ((("out of memory", "oom"),), "{service} is running out of memory", 0.4),
    ((("timeout", "timed out", "deadline exceeded"),), "a dependency of {service} is timing out", 0.35),
)


def planner(settings: Any):  # type: ignore[no-untyped-def]
    def plan(task: BranchTask) -> list[ToolProposal]:
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
    found = []
    for index, (template, n) in enumerate(grown[:TOP], start=1):
        example = examples[template]
        novelty = "new since the baseline" if not old.get(template) else f"{old[template]} in the baseline"
        summary = f'{n} x [{example.level.value}] "{template}" ({novelty}); e.g. at {hm(example.at)}: ' \
                  f'"{example.message[:200]}"'
        found.append(evidence(task, seen, summary, index=index, data={
            "template": template, "window_count": n, "baseline_count": old.get(template, 0),
            "level": example.level.value, "example": example.message[:500]}))
    return found


def _span(result: LogResult) -> float:
    return (result.query.end - result.query.start).total_seconds()


def _hypotheses(task: BranchTask, templates: list[Evidence], now: LogResult) -> list[Hypothesis]:
    found: list[Hypothesis] = []
    for groups, statement, confidence in PATTERNS:
        cited = [e for e in templates if all(any(w in str(e.data["template"]).lower() for w in g) for g in groups)]
        if not cited or any(e.evidence_id in h.evidence_ids for h in found for e in cited):
            continue
        lines = sum(int(str(e.data["window_count"])) for e in cited)
        unverified = ("counts come from a capped sample of lines",) if now.partial else ()
        found.append(Hypothesis(statement=statement.format(service=task.binding.service),
                                confidence=round(min(confidence + min(lines, 200) / 1000, 0.85), 2),
                                evidence_ids=tuple(e.evidence_id for e in cited), unverified=unverified))
    return found
