"""What the rules' analysis makes of one observation, shown to an LLM before the raw data.

A model sees at most ``observation_chars`` of a tool result, so a thousand raw log lines or a
range query's points are mostly cut off. The digest is the same pure analysis the rule policies
use: log lines grouped into templates (count, level, first/last time, the cause class and entity a
line names), and each series' robust shift (baseline, peak, last value, onset). Data, like the
observation itself: nothing in it is an instruction.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from pydantic import ValidationError

from ira.agents.model import Observation
from ira.agents.policies.analysis import count_templates, hm, shift_of, template_of
from ira.agents.policies.log_causes import cause_of, entity_of
from ira.core.signals import LogResult, MetricResult

TEMPLATES = 8
SERIES = 6


def digest(obs: Observation, *, split_at: datetime, dependencies: Sequence[str] = ()) -> dict[str, Any] | None:
    """The analysis of a successful observation, or None for a tool the analysis does not read."""
    if not obs.ok:
        return None
    try:
        if obs.tool == "logs.search":
            return _logs(LogResult.model_validate(obs.data), dependencies=tuple(dependencies))
        if obs.tool == "prometheus.query_range":
            return _series(MetricResult.model_validate(obs.data), split_at=split_at)
    except ValidationError:
        return None
    return None


def _logs(result: LogResult, *, dependencies: tuple[str, ...]) -> dict[str, Any]:
    counts, examples = count_templates(result.lines)
    times: dict[str, list[datetime]] = {}
    for line in result.lines:
        times.setdefault(template_of(line.message), []).append(line.at)
    found = []
    for template, n in counts.most_common(TEMPLATES):
        example = examples[template]
        cause = cause_of(example.message)
        found.append({"template": template, "count": n, "level": example.level.value,
                      "first": hm(min(times[template])), "last": hm(max(times[template])),
                      "cause": cause.name if cause else None,
                      "entity": entity_of(example.message, cause, dependencies=dependencies) if cause else None})
    return {"lines": len(result.lines), "total_matched": result.total_matched, "templates": found}


def _series(result: MetricResult, *, split_at: datetime) -> dict[str, Any]:
    found = []
    for series in result.series[:SERIES]:
        shift = shift_of(series.points, split_at)
        found.append({"labels": series.labels, "points": len(series.points)} | ({} if shift is None else {
            "baseline": round(shift.baseline, 6), "peak": round(shift.peak, 6), "last": round(shift.last, 6),
            "onset": hm(shift.jump_at) if shift.jump_at else None}))
    return {"series": len(result.series), "shifts": found, "baseline_ends": hm(split_at)}
