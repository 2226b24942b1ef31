"""Recordings: what live connectors answered, replayed shifted onto a new window."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from ira.connectors.bound import ConnectorSet
from ira.connectors.logs.jsonl import JsonlLogSource
from ira.connectors.recorded import (
    BundleInfo,
    NotRecordedError,
    RecordedError,
    RecordedToolError,
    Recorder,
    RecordingSet,
    recorded_connectors,
    write_recording,
)
from ira.connectors.recorded_tools import runbook_files, tool_recording
from ira.core.redact import Redactor
from ira.core.signals import (
    LogLevel,
    LogQuery,
    MetricResult,
    MetricSeries,
    Runbook,
    RunbookHit,
    RunbookQuery,
    RunbookResult,
)

T0 = datetime(2026, 4, 29, 2, 35, tzinfo=UTC)
END = T0 + timedelta(minutes=15)


async def test_a_recording_replays_shifted_to_the_new_window(tmp_path: Path) -> None:
    (tmp_path / "app.jsonl").write_text("".join(json.dumps(
        {"ts": (T0 + timedelta(minutes=m)).isoformat(), "level": "error", "service": "order-service",
         "message": f"db pool timeout {m}"}) + "\n" for m in range(0, 15, 2)))
    recorder = Recorder()
    live = recorder.wrap(ConnectorSet(logs=JsonlLogSource(str(tmp_path / "app.jsonl"))))
    assert live.logs is not None
    split = T0 + timedelta(minutes=7)
    for start, end in ((T0, split), (split, END)):
        await live.logs.search(LogQuery(service="order-service", start=start, end=end, min_level=LogLevel.ERROR))
    bundle = tmp_path / "bundle"
    bundle.mkdir()
    recorder.write(bundle / "observations.jsonl")
    (bundle / "bundle.json").write_text(BundleInfo(
        bundle_id="b1", tenant_id="demo", environment="prod", service="order-service", alert_name="A",
        window_start=T0, window_end=END).model_dump_json())

    later = timedelta(days=3, minutes=7)
    replay = recorded_connectors(bundle).for_window(END + later)
    assert replay.origin == "recorded:b1" and replay.logs is not None
    second = await replay.logs.search(LogQuery(service="order-service", start=split + later, end=END + later,
                                               min_level=LogLevel.ERROR))
    assert [line.message for line in second.lines] == [f"db pool timeout {m}" for m in (14, 12, 10, 8)]
    assert second.lines[0].at == T0 + timedelta(minutes=14) + later
    with pytest.raises(NotRecordedError):
        await replay.logs.search(LogQuery(service="payment-service", start=T0, end=END))


async def test_a_recorded_bundle_is_written_without_secrets(tmp_path: Path) -> None:
    (tmp_path / "app.jsonl").write_text(json.dumps(
        {"ts": (T0 + timedelta(minutes=1)).isoformat(), "level": "error", "service": "order-service",
         "message": "connect failed: DB_PASSWORD=hunter2-canary-77 and token tok-configured-9"}) + "\n")
    recorder = Recorder(redactor=Redactor(["tok-configured-9"]))
    live = recorder.wrap(ConnectorSet(logs=JsonlLogSource(str(tmp_path / "app.jsonl"))))
    assert live.logs is not None
    await live.logs.search(LogQuery(service="order-service", start=T0, end=END, min_level=LogLevel.ERROR))
    recorder.write(tmp_path / "observations.jsonl")

    written = (tmp_path / "observations.jsonl").read_text()
    assert "hunter2-canary-77" not in written and "tok-configured-9" not in written
    assert "connect failed: DB_PASSWORD=[REDACTED]" in written


async def test_tool_calls_of_a_run_are_answered_again_as_they_were(tmp_path: Path) -> None:
    metric = MetricResult(query="rate(x[5m])", start=T0, end=END, series=(
        MetricSeries(labels={"service": "billing"}, points=((T0, 1.0), (END, 4.0))),))
    books = RunbookResult(query=RunbookQuery(service="billing", alert="Backlog"), hits=(RunbookHit(
        runbook=Runbook(runbook_id="billing-backlog", title="Billing backlog", path="ops/billing.md",
                        services=("billing",), alerts=("Backlog",), body="Scale the workers."), score=3.0),))
    args = {"query": "rate(x[5m])", "start": T0.isoformat(), "end": END.isoformat(), "step_seconds": 30}
    calls = [
        tool_recording("prometheus.query_range", args, result=metric.model_dump(mode="json"), error=None),
        tool_recording("logs.search", {"service": "billing", "start": T0.isoformat(), "end": END.isoformat(),
                                       "min_level": "error"}, result=None,
                       error=RecordedError(code="unavailable", message="loki: HTTP 503", retryable=True)),
        tool_recording("runbooks.search", {"service": "billing", "alert": "Backlog"},
                       result=books.model_dump(mode="json"), error=None),
        tool_recording("logs.search", {"service": "billing"}, result=None,
                       error=RecordedError(code="denied", message="outside the window")),
    ]
    assert calls[3] is None  # refused by the loop: no connector was asked
    bundle = tmp_path / "bundle"
    write_recording(RecordingSet(info=BundleInfo(
        bundle_id="r1", tenant_id="acme", environment="prod", service="billing", alert_name="Backlog",
        window_start=T0, window_end=END), observations=tuple(c for c in calls if c),
        runbooks=runbook_files([books.model_dump(mode="json")])), bundle)
    later = timedelta(hours=5)
    replay = recorded_connectors(bundle).for_window(END + later)
    assert replay.metrics is not None and replay.logs is not None and replay.runbooks is not None

    answer = await replay.metrics.query_range("rate(x[1m])", start=T0 + later, end=END + later,
                                              step=timedelta(seconds=30))
    assert answer.series[0].points == ((T0 + later, 1.0), (END + later, 4.0))
    with pytest.raises(RecordedToolError) as failed:
        await replay.logs.search(LogQuery(service="billing", start=T0 + later, end=END + later,
                                          min_level=LogLevel.ERROR))
    assert (failed.value.code, failed.value.message, failed.value.retryable) == ("unavailable", "loki: HTTP 503", True)
    found = await replay.runbooks.search(RunbookQuery(service="billing", alert="Backlog"))
    assert [h.runbook.runbook_id for h in found.hits] == ["billing-backlog"]
    from_files = await replay.runbooks.search(RunbookQuery(service="billing", text="backlog workers"))
    assert [h.runbook.title for h in from_files.hits] == ["Billing backlog"]  # not recorded: the bundle's files
    assert "Scale the workers." in (bundle / "runbooks" / "billing.md").read_text()


def test_a_model_call_the_provider_failed_replays_as_its_errors_then_its_reply() -> None:
    from pydantic import ValidationError

    from ira.connectors.recorded_models import ModelNotRecordedError, RecordedModelCall, RecordedModels
    from ira.core.errors import PlatformError

    rejected = {"code": "connector_rejected", "message": "openai rejected the request: HTTP 400"}
    reply = {"model": "gpt-fake", "text": "ok", "tool_calls": [], "usage": {"input_tokens": 1, "output_tokens": 2}}
    models = RecordedModels((RecordedModelCall(fingerprint="sha256:a", errors=(rejected,), response=reply),
                             RecordedModelCall(fingerprint="sha256:b", errors=(rejected,))))
    with pytest.raises(PlatformError) as first:
        models.reply("sha256:a")
    assert (first.value.code, first.value.message, first.value.retryable) == (
        "connector_rejected", rejected["message"], False)
    assert models.reply("sha256:a", failed=1).text == "ok"  # asked again after that failure: the reply
    for failed in (0, 3):  # a request that never got an answer fails every time, as it did
        with pytest.raises(PlatformError, match="HTTP 400"):
            models.reply("sha256:b", failed=failed)
    with pytest.raises(ModelNotRecordedError):
        models.reply("sha256:c")
    with pytest.raises(ValidationError, match="a response or the provider's errors"):
        RecordedModelCall(fingerprint="sha256:d")
