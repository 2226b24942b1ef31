"""Observations served from a scenario bundle (replay, the demo), and the recorder that makes them.

A bundle directory holds ``bundle.json`` (id, tenant, service, the recorded window),
``observations.jsonl`` (one line per connector call: ``port``, ``request``, ``result``) and
``runbooks/``. Replaying anchors the recording to the new window: every time in a recorded
answer moves by ``new window end - recorded window end``, and a request is matched to the
recorded call of the same port and key whose shifted time range is closest. Runbooks are
served by a real ``FileRunbookSource`` over the bundle's own runbooks. Nothing here touches
the network: a call with no recording is refused (``not_recorded``), never made live.
"""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from pydantic import Field, model_validator

from ira.connectors.bound import ConnectorSet
from ira.connectors.recorded_models import RecordedError, RecordedModelCall, RecordedModels, RecordedToolError
from ira.connectors.runbooks import FileRunbookSource
from ira.core.errors import ConnectorRejectedError
from ira.core.model import Model
from ira.core.ports import ChangeSource, LogSource, MetricSource, RunbookSource
from ira.core.redact import Redactor
from ira.core.signals import (
    READ_ONLY_RETRY,
    ChangeQuery,
    ChangeResult,
    LogQuery,
    LogResult,
    MetricResult,
    MetricSeries,
    RetryContract,
    RunbookQuery,
    RunbookResult,
)

SYSTEM = "recorded"
MODEL_CALLS = "model_calls.jsonl"
_RANGE = re.compile(r"\[[0-9smhdwy]+\]")


class NotRecordedError(ConnectorRejectedError):
    code = "not_recorded"


class BundleInfo(Model):
    """``bundle.json``: what the recording is of, and the window its observations cover."""

    format_version: int = 1
    """Absent in bundles written before versioning: they are version 1."""
    bundle_id: str
    tenant_id: str
    environment: str
    service: str
    alert_name: str
    window_start: datetime
    window_end: datetime
    description: str = ""
    version: str | None = None
    source_run_id: str | None = None
    """The run this bundle was recorded from (``ira record``), when it was."""


class Recording(Model):
    """One line of ``observations.jsonl``: a tool call and what it answered (or how it failed)."""

    port: str
    """``metrics.query_range``, ``metrics.query``, ``logs.search``, ``changes.list``, ``runbooks.search``."""
    key: str
    start: datetime
    end: datetime
    request: dict[str, Any]
    result: dict[str, Any] | None = None
    error: RecordedError | None = None
    at: datetime | None = None
    """When the call was made (format_version 2)."""
    partial: bool = False
    """The answer covered only part of what was asked (truncated, a shard missing)."""

    @model_validator(mode="after")
    def _result_or_error(self) -> Recording:
        if (self.result is None) == (self.error is None):
            raise ValueError("an observation has exactly one of result or error")
        return self

    def answer(self) -> dict[str, Any]:
        """The recorded result, or the recorded error raised again."""
        if self.error is not None:
            raise RecordedToolError(self.error)
        assert self.result is not None  # the validator guarantees one of them
        return self.result


def query_key(query: str) -> str:
    """PromQL with its range selectors blanked: ``rate(x[5s])`` matches ``rate(x[1m])``."""
    return _RANGE.sub("[]", " ".join(query.split()))


@dataclass
class _Recordings:
    entries: list[Recording]
    shift: timedelta = timedelta(0)

    def find(self, port: str, key: str, *, start: datetime, end: datetime) -> Recording:
        found = self.all(port, key)
        if not found:
            raise NotRecordedError(SYSTEM, f"no recording of {port} for {key!r}")
        return min(found, key=lambda r: abs((r.start + self.shift - start).total_seconds())
                   + abs((r.end + self.shift - end).total_seconds()))

    def all(self, port: str, key: str) -> list[Recording]:
        return [r for r in self.entries if r.port == port and r.key == key]


class RecordedMetricSource:
    retry: RetryContract = READ_ONLY_RETRY

    def __init__(self, recordings: _Recordings) -> None:
        self._rec = recordings

    async def query_range(self, query: str, *, start: datetime, end: datetime, step: timedelta) -> MetricResult:
        return self._answer("metrics.query_range", query, start=start, end=end)

    async def query(self, query: str, *, at: datetime) -> MetricResult:
        return self._answer("metrics.query", query, start=at, end=at)

    def _answer(self, port: str, query: str, *, start: datetime, end: datetime) -> MetricResult:
        rec = self._rec.find(port, query_key(query), start=start, end=end)
        result, shift = MetricResult.model_validate(rec.answer()), self._rec.shift
        series = tuple(MetricSeries(labels=s.labels, points=tuple((t + shift, v) for t, v in s.points))
                       for s in result.series)
        return result.model_copy(update={"query": query, "start": start, "end": end, "series": series})


class RecordedLogSource:
    retry: RetryContract = READ_ONLY_RETRY

    def __init__(self, recordings: _Recordings) -> None:
        self._rec = recordings

    async def search(self, query: LogQuery) -> LogResult:
        rec = self._rec.find("logs.search", log_key(query), start=query.start, end=query.end)
        result = LogResult.model_validate(rec.answer())
        lines = tuple(line.model_copy(update={"at": line.at + self._rec.shift}) for line in result.lines)
        return result.model_copy(update={"query": query, "lines": lines})


class RecordedChangeSource:
    retry: RetryContract = READ_ONLY_RETRY

    def __init__(self, recordings: _Recordings) -> None:
        self._rec = recordings

    async def list_changes(self, query: ChangeQuery) -> ChangeResult:
        rec = self._rec.find("changes.list", query.service, start=query.start, end=query.end)
        result = ChangeResult.model_validate(rec.answer())
        found = tuple(c.model_copy(update={"at": c.at + self._rec.shift}) for c in result.changes)
        return result.model_copy(update={"query": query, "changes": found})


class RecordedRunbookSource:
    """A recorded search answers as it did (the runbooks it returned, in its order); a search the
    recording does not hold is asked of the bundle's own runbook files (a version 1 bundle)."""

    retry: RetryContract = READ_ONLY_RETRY

    def __init__(self, recordings: _Recordings, files: RunbookSource) -> None:
        self._rec, self._files = recordings, files

    async def search(self, query: RunbookQuery) -> RunbookResult:
        found = self._rec.all(RUNBOOKS_PORT, runbook_key(query))
        if not found:
            return await self._files.search(query)
        return RunbookResult.model_validate(found[0].answer()).model_copy(update={"query": query})


RUNBOOKS_PORT = "runbooks.search"


def log_key(query: LogQuery) -> str:
    return json.dumps([query.service, query.min_level, query.text])


def runbook_key(query: RunbookQuery) -> str:
    return json.dumps([query.service, query.alert, query.text, query.version])


def read_bundle(directory: Path) -> tuple[BundleInfo, list[Recording]]:
    info = BundleInfo.model_validate_json((directory / "bundle.json").read_text(encoding="utf-8"))
    path = directory / "observations.jsonl"
    lines = path.read_text(encoding="utf-8").splitlines() if path.exists() else []
    return info, [Recording.model_validate_json(line) for line in lines if line.strip()]


class RecordingSet(Model):
    """A bundle's recording in one document (an artifact): what a staging replay's agents answer from."""

    info: BundleInfo
    observations: tuple[Recording, ...] = ()
    model_calls: tuple[RecordedModelCall, ...] = ()
    runbooks: dict[str, str] = Field(default_factory=dict)
    """Runbook file name -> content, as the bundle had them."""


def write_recording(recording: RecordingSet, directory: Path) -> Path:
    """Lay a recording out as a bundle directory (once: the directory is named by its content)."""
    if (directory / "bundle.json").exists():
        return directory
    partial = directory.with_name(directory.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    (partial / "runbooks").mkdir(parents=True)
    (partial / "observations.jsonl").write_text("".join(o.model_dump_json() + "\n" for o in recording.observations),
                                                encoding="utf-8")
    (partial / MODEL_CALLS).write_text("".join(c.model_dump_json() + "\n" for c in recording.model_calls),
                                       encoding="utf-8")
    for name, text in recording.runbooks.items():
        (partial / "runbooks" / Path(name).name).write_text(text, encoding="utf-8")
    (partial / "bundle.json").write_text(recording.info.model_dump_json(), encoding="utf-8")
    partial.rename(directory)
    return directory


def read_model_calls(directory: Path) -> tuple[RecordedModelCall, ...]:
    path = directory / MODEL_CALLS
    lines = path.read_text(encoding="utf-8").splitlines() if path.exists() else []
    return tuple(RecordedModelCall.model_validate_json(line) for line in lines if line.strip())


def recorded_connectors(directory: Path) -> ConnectorSet:
    """The connectors to bind for a bundle: anchored to each branch's window on use. A bundle with
    model calls also answers an LLM policy (``models``)."""
    info, entries = read_bundle(directory)
    runbooks = FileRunbookSource(directory / "runbooks")
    calls = read_model_calls(directory)

    def anchored(window_end: datetime) -> ConnectorSet:
        shift = window_end - info.window_end
        rec = _Recordings(entries, shift=shift)
        return ConnectorSet(metrics=RecordedMetricSource(rec), logs=RecordedLogSource(rec),
                            models=RecordedModels(calls, shift=shift) if calls else None,
                            runbooks=RecordedRunbookSource(rec, runbooks),
                            changes=RecordedChangeSource(rec), origin=f"recorded:{info.bundle_id}")

    return ConnectorSet(**{**anchored(info.window_end).__dict__, "anchor": anchored})


@dataclass
class Recorder:
    """Wraps live connectors and keeps every answer, to be written as ``observations.jsonl``."""

    entries: list[Recording] = field(default_factory=list)
    redactor: Redactor = field(default_factory=Redactor)
    """A bundle leaves the installation: what it records is written through the redactor."""

    def wrap(self, live: ConnectorSet) -> ConnectorSet:
        return ConnectorSet(metrics=_RecordingMetrics(live.metrics, self.add) if live.metrics else None,
                            logs=_RecordingLogs(live.logs, self.add) if live.logs else None, runbooks=live.runbooks,
                            changes=_RecordingChanges(live.changes, self.add) if live.changes else None,
                            origin=live.origin)

    def add(self, port: str, key: str, *, start: datetime, end: datetime, request: dict[str, Any],
            result: Model) -> None:
        self.entries.append(Recording(port=port, key=key, start=start, end=end, request=request,
                                      result=result.model_dump(mode="json")))

    def write(self, path: Path) -> None:
        lines = (json.dumps(self.redactor.value(e.model_dump(mode="json")), sort_keys=True) for e in self.entries)
        path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")


_Add = Callable[..., None]


@dataclass
class _RecordingMetrics:
    inner: MetricSource
    add: _Add

    async def query_range(self, query: str, *, start: datetime, end: datetime, step: timedelta) -> MetricResult:
        result = await self.inner.query_range(query, start=start, end=end, step=step)
        self.add("metrics.query_range", query_key(query), start=start, end=end,
                 request={"query": query, "step_seconds": step.total_seconds()}, result=result)
        return result

    async def query(self, query: str, *, at: datetime) -> MetricResult:
        result = await self.inner.query(query, at=at)
        self.add("metrics.query", query_key(query), start=at, end=at, request={"query": query}, result=result)
        return result


@dataclass
class _RecordingLogs:
    inner: LogSource
    add: _Add

    async def search(self, query: LogQuery) -> LogResult:
        result = await self.inner.search(query)
        self.add("logs.search", log_key(query), start=query.start, end=query.end,
                 request=query.model_dump(mode="json"), result=result)
        return result


@dataclass
class _RecordingChanges:
    inner: ChangeSource
    add: _Add

    async def list_changes(self, query: ChangeQuery) -> ChangeResult:
        result = await self.inner.list_changes(query)
        self.add("changes.list", query.service, start=query.start, end=query.end,
                 request=query.model_dump(mode="json"), result=result)
        return result
