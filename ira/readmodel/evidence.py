"""A fact's evidence, shaped for a person: a metric's series (thinned for a small chart), a
log search's example lines, the deploys found, the runbooks matched. Pure.

The artifact a fact cites holds the tool's whole answer; the decision page needs a glance,
so each kind keeps a bounded sample and says how much there was.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Annotated, Literal

from pydantic import Field, ValidationError

from ira.core.model import Model
from ira.core.signals import Change, ChangeResult, LogLine, LogResult, MetricResult, RunbookResult

MAX_POINTS = 120
MAX_SERIES = 4
MAX_LINES = 5
MAX_CHANGES = 5


class SeriesView(Model):
    labels: dict[str, str]
    points: tuple[tuple[datetime, float], ...]


class MetricEvidence(Model):
    kind: Literal["metric"] = "metric"
    query: str
    series: tuple[SeriesView, ...]
    series_total: int


class LogEvidence(Model):
    kind: Literal["logs"] = "logs"
    lines: tuple[LogLine, ...]
    total_matched: int


class ChangeEvidence(Model):
    kind: Literal["changes"] = "changes"
    changes: tuple[Change, ...]


class RunbookHitView(Model):
    runbook_id: str
    title: str
    path: str
    score: float
    applies: bool | None
    """False: written for another version of the service (flagged, not applied)."""
    causes: tuple[str, ...]


class RunbookEvidence(Model):
    kind: Literal["runbooks"] = "runbooks"
    hits: tuple[RunbookHitView, ...]


EvidenceView = Annotated[MetricEvidence | LogEvidence | ChangeEvidence | RunbookEvidence, Field(discriminator="kind")]


def shape_evidence(source: str, body: bytes) -> EvidenceView | None:
    """The glance for the artifact of a fact whose tool was ``source``; None if it is not one."""
    try:
        raw = json.loads(body)
        if source.startswith("prometheus."):
            return _metric(MetricResult.model_validate(raw))
        if source == "logs.search":
            result = LogResult.model_validate(raw)
            return LogEvidence(lines=result.lines[:MAX_LINES], total_matched=result.total_matched)
        if source == "deployments.list":
            return ChangeEvidence(changes=ChangeResult.model_validate(raw).changes[:MAX_CHANGES])
        if source == "runbooks.search":
            return _runbooks(RunbookResult.model_validate(raw))
    except (ValueError, ValidationError):
        return None
    return None


def _metric(result: MetricResult) -> MetricEvidence:
    series = tuple(SeriesView(labels=s.labels, points=thin(s.points, MAX_POINTS)) for s in result.series[:MAX_SERIES])
    return MetricEvidence(query=result.query, series=series, series_total=len(result.series))


def thin(points: tuple[tuple[datetime, float], ...], most: int) -> tuple[tuple[datetime, float], ...]:
    """Every n-th point so at most ``most`` remain; the last point always stays."""
    if len(points) <= most:
        return points
    step = -(-len(points) // most)
    kept = points[::step]
    return kept if kept[-1] == points[-1] else (*kept, points[-1])


def _runbooks(result: RunbookResult) -> RunbookEvidence:
    return RunbookEvidence(hits=tuple(
        RunbookHitView(runbook_id=h.runbook.runbook_id, title=h.runbook.title, path=h.runbook.path, score=h.score,
                       applies=h.applies, causes=h.runbook.causes) for h in result.hits))
