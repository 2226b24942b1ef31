"""Recordings: what live connectors answered, replayed shifted onto a new window."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from ira.connectors.bound import ConnectorSet
from ira.connectors.logs.jsonl import JsonlLogSource
from ira.connectors.recorded import BundleInfo, NotRecordedError, Recorder, recorded_connectors
from ira.core.redact import Redactor
from ira.core.signals import LogLevel, LogQuery

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
