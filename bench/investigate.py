"""Investigation benchmark: how long the branches take on the live demo (rule policies).

Usage:
  python bench/investigate.py [--ops N]                 branch step claim -> BranchResult committed,
                                                        per branch, against a demo it starts itself
                                                        (order-service + Prometheus, fault injected)
  python bench/investigate.py --ira-url URL [--ops N]   also alert POST -> run WAITING(approval) on a
                                                        running `ira dev` (needs sources, triage,
                                                        coordinator and agents bound to the demo)

Prints one JSON line per measurement on stdout (p50/p99 in ms), progress on stderr. Not a test:
no thresholds. The issue's goal for alert -> draft waiting for approval is p50 < 2 s.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
import uuid
from contextlib import AsyncExitStack
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx

from ira.connectors.bound import ConnectorSet
from ira.connectors.deployments import SqlChangeSource
from ira.connectors.logs.jsonl import JsonlLogSource
from ira.connectors.prometheus import PrometheusMetricSource
from ira.connectors.runbooks import FileRunbookSource
from ira.core.investigation import BranchKind
from ira.infra.demo import RUNBOOKS_DIR
from ira.infra.demo.branches import bindings, create_run, dispatcher, record_change, run_step, scratch_db
from ira.infra.demo.live import spawn

ALERT = {"labels": {"alertname": "OrderServiceHighLatency", "service": "order-service", "severity": "critical",
                    "version": "v3"}, "annotations": {"summary": "order-service p95 latency is 2.1s"}}


def progress(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def figures(name: str, samples_ms: list[float], **extra: Any) -> None:
    ordered = sorted(samples_ms)
    p99 = ordered[min(len(ordered) - 1, int(round(0.99 * (len(ordered) - 1))))]
    print(json.dumps({"bench": name, "ops": len(ordered), "p50_ms": round(statistics.median(ordered), 1),
                      "p99_ms": round(p99, 1), "max_ms": round(ordered[-1], 1), **extra}), flush=True)


def _port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def start_demo(stack: AsyncExitStack, home: Path) -> tuple[str, Path, dict[str, Any]]:
    """order-service + Prometheus (1 s scrapes); a baseline, then v3 deployed; returns after the jump."""
    service_port, prom_port, log = _port(), _port(), home / "order-service.jsonl"
    await spawn(stack, [sys.executable, "-m", "ira.infra.demo.order_service", "--port", str(service_port), "--log",
                        str(log)], home / "service.out", ready=f"http://127.0.0.1:{service_port}/healthz")
    (home / "prometheus.yml").write_text(json.dumps({
        "global": {"scrape_interval": "1s"},
        "scrape_configs": [{"job_name": "order-service",
                            "static_configs": [{"targets": [f"127.0.0.1:{service_port}"]}]}]}))
    await spawn(stack, ["prometheus", f"--config.file={home / 'prometheus.yml'}", f"--storage.tsdb.path={home}/tsdb",
                        f"--web.listen-address=127.0.0.1:{prom_port}"], home / "prom.out",
                ready=f"http://127.0.0.1:{prom_port}/-/ready")
    progress("demo up: 20 s of healthy baseline, then v3")
    await asyncio.sleep(20)  # a benchmark, not a test: it needs real samples in Prometheus
    async with httpx.AsyncClient(timeout=5) as client:
        change = (await client.post(f"http://127.0.0.1:{service_port}/admin/deploy", json={"version": "v3"})).json()
    await asyncio.sleep(15)
    return f"http://127.0.0.1:{prom_port}", log, change


async def bench_branches(ops: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp)
        async with AsyncExitStack() as stack:
            prometheus, log, change = await start_demo(stack, home)
            db = await scratch_db(home)
            stack.push_async_callback(db.close)
            await record_change(db, change)
            client = await stack.enter_async_context(httpx.AsyncClient(base_url=prometheus, timeout=10))
            worker = dispatcher(db, ConnectorSet(metrics=PrometheusMetricSource(client), logs=JsonlLogSource(str(log)),
                                                 runbooks=FileRunbookSource(RUNBOOKS_DIR), changes=SqlChangeSource(db)))
            timings: dict[str, list[float]] = {k.value: [] for k in BranchKind}
            together: list[float] = []
            for op in range(ops):
                await _one(db, worker, change=change, timings=timings, together=together)
                if op % 5 == 0:
                    progress(f"op {op + 1}/{ops}")
            for branch, samples in timings.items():
                figures("investigate.branch_claim_to_result", samples, branch=branch, policy="rules")
            figures("investigate.three_branches_concurrently", together, policy="rules")


async def _one(db: Any, worker: Any, *, change: dict[str, Any], timings: dict[str, list[float]],
               together: list[float]) -> None:
    now = datetime.now(UTC)
    alert = ALERT | {"startsAt": change["at"]}
    window = (now - timedelta(minutes=30), now)
    run_id = await create_run(db, bindings(alert, window))
    for kind in BranchKind:
        started = time.perf_counter()
        result = await run_step(db, worker, run_id=run_id, kind=kind)
        timings[kind.value].append((time.perf_counter() - started) * 1000)
        assert result.evidence, f"{kind.value} found no evidence"
    run_id = await create_run(db, bindings(alert, window))
    started = time.perf_counter()
    await asyncio.gather(*(run_step(db, worker, run_id=run_id, kind=k) for k in BranchKind))
    together.append((time.perf_counter() - started) * 1000)


async def bench_pipeline(url: str, ops: int, timeout: float) -> None:
    """Alert POST -> a new run WAITING(approval), one alert at a time (unique per op)."""
    admin = {"Authorization": "Bearer dev-admin-token"}
    samples: list[float] = []
    async with httpx.AsyncClient(base_url=url, timeout=10) as client:
        for op in range(ops):
            seen = await _waiting(client, admin)
            started = time.perf_counter()
            response = await client.post("/v1/sources/alertmanager/am", json=_payload(),
                                         headers={"Authorization": "Bearer dev-am-token"})
            response.raise_for_status()
            while True:
                if await _waiting(client, admin) - seen:
                    samples.append((time.perf_counter() - started) * 1000)
                    break
                if time.perf_counter() - started > timeout:
                    progress(f"op {op + 1}: no run waiting for approval within {timeout:g}s")
                    break
                await asyncio.sleep(0.02)
    if samples:
        figures("investigate.alert_to_draft_waiting_approval", samples, policy="rules", url=url)


async def _waiting(client: httpx.AsyncClient, headers: dict[str, str]) -> set[str]:
    response = await client.get("/v1/runs", params={"state": "waiting", "wait_kind": "approval", "limit": 500},
                                headers=headers)
    response.raise_for_status()  # a refused query must fail the benchmark, not read as "nothing yet"
    return {r["run_id"] for r in response.json()["runs"]}


def _payload() -> dict[str, Any]:
    now = datetime.now(UTC).isoformat().replace("+00:00", "Z")
    bench_id = uuid.uuid4().hex[:12]
    # A new alert name per op: triage groups by alertname + service + environment, so each op
    # opens its own incident (and run) instead of joining the previous one.
    labels = {**ALERT["labels"], "alertname": f"{ALERT['labels']['alertname']}-{bench_id}", "bench_id": bench_id}
    alert = {"status": "firing", "labels": labels, "annotations": ALERT["annotations"], "startsAt": now,
             "endsAt": "0001-01-01T00:00:00Z", "generatorURL": "http://127.0.0.1:9090/graph",
             "fingerprint": uuid.uuid4().hex[:16]}
    return {"receiver": "ira", "status": "firing", "alerts": [alert], "groupLabels": {}, "commonLabels": labels,
            "commonAnnotations": ALERT["annotations"], "externalURL": "http://127.0.0.1:9093", "version": "4",
            "groupKey": f"{{}}:{{bench_id=\"{labels['bench_id']}\"}}", "truncatedAlerts": 0}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--ops", type=int, default=20)
    parser.add_argument("--ira-url", default=None, help="a running `ira dev` for the whole-pipeline figure")
    parser.add_argument("--timeout", type=float, default=30.0)
    args = parser.parse_args()
    asyncio.run(bench_branches(args.ops))
    if args.ira_url:
        asyncio.run(bench_pipeline(args.ira_url, args.ops, args.timeout))


if __name__ == "__main__":
    main()
