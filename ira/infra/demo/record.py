"""Record the ALR-20260429-017 scenario bundle from a live run of the demo.

    python -m ira.infra.demo.record [--out DIR] [--baseline SECONDS]

Starts the order-service, a Prometheus with the demo rules (1 s scrapes), and an Alertmanager
whose webhook is a capture server here; lets a healthy baseline build, deploys v3, waits until
``OrderServiceHighLatency`` reaches the webhook, then runs the three branches with the rule
policies against the live systems through a ``Recorder``. The bundle gets the source events
(Alertmanager payloads + the deploy change event, with arrival offsets), the recorded
observations, the runbooks, the branch results and the expectations a replay is held to.
This is a script, not a test: waiting for real time to pass is what it is for.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import sys
import tempfile
from contextlib import AsyncExitStack
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx

from ira.connectors.recorded import BundleInfo, Recorder
from ira.infra.demo import DEMO_BUNDLE, RUNBOOKS_DIR, SERVICE
from ira.infra.demo.branches import run_branches
from ira.infra.demo.live import Capture, start_capture, start_live_demo

ALERT = "OrderServiceHighLatency"
WINDOW_BEFORE = timedelta(minutes=30)


def say(message: str) -> None:
    print(f"record: {message}", file=sys.stderr, flush=True)


async def start_stack(stack: AsyncExitStack, home: Path, capture_url: str) -> tuple[str, Path, str]:
    """order-service, Alertmanager (-> capture), Prometheus (demo rules, -> Alertmanager)."""
    demo = await start_live_demo(stack, home, webhook_base=capture_url, service_args=("--seed", "17"))
    return demo.service_url, demo.log_path, demo.prometheus_url


async def record(out: Path, baseline: float) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp)
        async with AsyncExitStack() as stack:
            capture = Capture()
            capture_url = await stack.enter_async_context(start_capture(capture))
            service, log, prometheus = await start_stack(stack, home, capture_url)
            started = datetime.now(UTC)
            say(f"stack up; healthy baseline for {baseline:g}s")
            await asyncio.sleep(baseline)
            async with httpx.AsyncClient(timeout=5) as client:
                change = (await client.post(f"{service}/admin/deploy", json={
                    "version": "v3", "commit": "7c1d9e2", "actor": "deploy-bot"})).json()
            say(f"deployed v3 at {change['at']}; waiting for {ALERT}")
            firing = await capture.wait_for(ALERT, timeout=600)
            end = datetime.now(UTC)
            alert = next(a for a in firing["payload"]["alerts"] if a["labels"]["alertname"] == ALERT)
            say(f"{ALERT} arrived; running the branches")
            recorder = Recorder()
            results, info = await run_branches(home, recorder, change=change, alert=alert, prometheus=prometheus,
                                               log=log, window=(_time(alert["startsAt"]) - WINDOW_BEFORE, end))
        write_bundle(out, info=info, recorder=recorder, results=results, capture=capture, change=change,
                     started=started)


def _time(value: str) -> datetime:
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


def write_bundle(out: Path, *, info: BundleInfo, recorder: Recorder, results: dict[str, Any], capture: Capture,
                 change: dict[str, Any], started: datetime) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "bundle.json").write_text(info.model_dump_json(indent=2) + "\n")
    recorder.write(out / "observations.jsonl")
    if (out / "runbooks").exists():
        shutil.rmtree(out / "runbooks")
    shutil.copytree(RUNBOOKS_DIR, out / "runbooks")
    events = [{"offset_seconds": round((_time(change["at"]) - started).total_seconds(), 3), "kind": "change",
               "source_id": "changes", "path": "/v1/sources/change/changes", "payload": change}]
    events += [{"offset_seconds": round((p["received_at"] - started).total_seconds(), 3), "kind": "alertmanager",
                "source_id": "am", "path": "/v1/sources/alertmanager/am", "payload": p["payload"]}
               for p in capture.received]
    (out / "events.json").write_text(json.dumps(sorted(events, key=lambda e: e["offset_seconds"]), indent=2) + "\n")
    (out / "results.json").write_text(json.dumps(results, indent=2, sort_keys=True) + "\n")
    (out / "expectations.json").write_text(json.dumps(expectations(results), indent=2) + "\n")
    say(f"bundle written to {out}")


def expectations(results: dict[str, Any]) -> dict[str, Any]:
    """What a replay of this bundle must reproduce (phrases, not exact numbers)."""
    return {
        "alert": ALERT, "service": SERVICE, "version": "v3",
        "branches": {
            "metrics": {"stop_reason": results["metrics"]["stop_reason"],
                        "evidence_contains": ["p95 latency of order-service rose", "deploy of order-service v3",
                                              "changed version v2 -> v3"],
                        "hypotheses_contain": ["deploy of order-service v3"]},
            "logs": {"stop_reason": results["logs"]["stop_reason"],
                     "evidence_contains": ["db pool timeout: could not acquire connection"],
                     "hypotheses_contain": ["pool exhaustion"]},
            "runbooks": {"stop_reason": results["runbooks"]["stop_reason"],
                         "evidence_contains": ["order-service-db-pool-v3.md", "FLAGGED"],
                         "first_runbook": "order-service-db-pool-v3"},
        },
        "ticket_draft_mentions": ["order-service", "v3", "DB", "pool"],
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m ira.infra.demo.record", description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=DEMO_BUNDLE)
    parser.add_argument("--baseline", type=float, default=90.0, help="seconds of healthy traffic before the deploy")
    args = parser.parse_args(argv)
    asyncio.run(record(args.out, args.baseline))


if __name__ == "__main__":
    main()

