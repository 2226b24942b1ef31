"""The bundled ALR-20260429-017 scenario replays from its recording, on any later window."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

from ira.core.investigation import BranchKind, StopReason
from ira.infra.demo import DEMO_BUNDLE
from ira.infra.demo.branches import bindings, create_run, dispatcher, record_change, run_step, scratch_db
from ira.infra.demo.bundle import bundle_connectors, load_bundle, unmet_expectations


async def test_the_demo_bundle_replays_to_its_expectations(tmp_path: Path) -> None:
    bundle = load_bundle(DEMO_BUNDLE)
    alert = next(a for e in bundle.events if e.kind == "alertmanager" for a in e.payload["alerts"])
    change = next(e.payload for e in bundle.events if e.kind == "change")
    assert alert["labels"]["alertname"] == bundle.info.alert_name and alert["labels"]["version"] == "v3"
    db = await scratch_db(tmp_path)
    try:
        await record_change(db, change)  # the recorded deploy is served by the recording, not the table
        now = datetime.now(UTC)
        shift = now - bundle.info.window_end
        moved = alert | {"startsAt": (datetime.fromisoformat(alert["startsAt"].replace("Z", "+00:00")) + shift)
                         .isoformat()}
        run_id = await create_run(db, bindings(moved, (now - timedelta(minutes=30), now)))
        worker = dispatcher(db, bundle_connectors(DEMO_BUNDLE))
        results = {k.value: await run_step(db, worker, run_id=run_id, kind=k) for k in BranchKind}
    finally:
        await db.close()
    assert unmet_expectations(bundle, results) == []
    assert all(r.stop_reason == StopReason.DONE for r in results.values())
    assert bundle.events[0].offset_seconds < bundle.events[-1].offset_seconds


async def test_a_recorded_tool_error_replays_as_that_error(tmp_path: Path) -> None:
    """A version 2 bundle records a failed call as code + message: the branch meets the same failure."""
    import json
    import shutil

    from ira.connectors.recorded import RecordedToolError, recorded_connectors
    from ira.core.signals import LogQuery

    copy = tmp_path / "bundle"
    shutil.copytree(DEMO_BUNDLE, copy)
    manifest = json.loads((copy / "bundle.json").read_text())
    (copy / "bundle.json").write_text(json.dumps({**manifest, "format_version": 2}))
    rows = [json.loads(line) for line in (copy / "observations.jsonl").read_text().splitlines()]
    failed = {"code": "connector_unavailable", "message": "loki answered 503", "retryable": True}
    rows = [{**r, "result": None, "error": failed} if r["port"] == "logs.search" else r for r in rows]
    (copy / "observations.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    bundle = load_bundle(copy)
    logs = recorded_connectors(copy).logs
    assert logs is not None
    request = next(r["request"] for r in rows if r["port"] == "logs.search")
    try:
        await logs.search(LogQuery.model_validate(request))
    except RecordedToolError as exc:
        assert (exc.code, exc.message, exc.retryable) == ("connector_unavailable", "loki answered 503", True)
    else:
        raise AssertionError("the recorded error was not raised")
    alert = next(a for e in bundle.events if e.kind == "alertmanager" for a in e.payload["alerts"])
    db = await scratch_db(tmp_path)
    try:
        now = datetime.now(UTC)
        moved = alert | {"startsAt": (datetime.fromisoformat(alert["startsAt"].replace("Z", "+00:00"))
                                      + (now - bundle.info.window_end)).isoformat()}
        run_id = await create_run(db, bindings(moved, (now - timedelta(minutes=30), now)))
        worker = dispatcher(db, recorded_connectors(copy))
        result = await run_step(db, worker, run_id=run_id, kind=BranchKind.LOGS)
    finally:
        await db.close()
    assert (result.stop_reason, result.error) == (StopReason.ERROR, "no evidence; tool errors: connector_unavailable")
