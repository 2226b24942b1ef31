"""The webhook's own CPU per alert, in one process: the ingest lane's ASGI app called directly.

What runs: the real lane (``build_lane``: parsing, normalizing, the urgent-group memory, edge
dedupe and rate limits in one Redis script, the outbox messages, the group commit into a
SQLite file with ira's schema) on a real Redis; what does not: uvicorn, the relay, triage,
any other process. So the figure is the Python work an alert costs the gateway, without the
rest of ``ira dev`` competing for the cores: on a loaded machine this is the figure that
resolves a change of a few µs per alert, which ``bench/ingest.py --pipeline`` cannot.
Compare two trees back to back (``PYTHONPATH=<tree>``), alternating, and read the minimum.

Prints one JSON line per scenario: this process's CPU µs per alert (``time.process_time``,
which includes aiosqlite's thread) and per request, over ``--requests`` requests sent
``--concurrency`` at a time, after a warm-up.

Usage: .venv/bin/python bench/edge_cpu.py [--redis-url redis://127.0.0.1:6379/0]
       [--requests 3000] [--concurrency 32] [--alerts 1,100] [--repeats 3]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import tempfile
import time
import uuid
from typing import Any

from prometheus_client import CollectorRegistry

from ira.core.clock import SystemClock
from ira.runtime.settings import Settings
from ira.runtime.stack import redis_client
from ira.runtime.store.database import Database
from ira.runtime.store.group_commit import GroupCommit
from ira.runtime.store.migrate import upgrade
from ira.sources.main import build_lane

TOKEN = "bench-token"
_ALERT = ('{"status":"firing","labels":{"alertname":"BenchAlert","instance":"%s","service":"bench",'
          '"severity":"warning","run":"%s"},"annotations":{"summary":"bench alert"},'
          '"startsAt":"2026-04-29T10:00:00Z","endsAt":"0001-01-01T00:00:00Z",'
          '"generatorURL":"http://prometheus.bench/graph?g0.expr=up","fingerprint":"%s"}')
"""The alert ``bench/ingest.lua`` sends (distinct instance and fingerprint per alert)."""


def body(run: str, request: int, alerts: int) -> bytes:
    parts = [_ALERT % (f"{request}-{i}", run, f"{run}{request:08x}{i:04x}") for i in range(alerts)]
    return ('{"version":"4","status":"firing","receiver":"ira","groupKey":"bench","alerts":[' + ",".join(parts)
            + "]}").encode()


async def post(app: Any, payload: bytes) -> int:
    scope = {"type": "http", "method": "POST", "path": "/v1/sources/alertmanager/am",
             "path_params": {"kind": "alertmanager", "source_id": "am"},
             "headers": [(b"authorization", f"Bearer {TOKEN}".encode()),
                         (b"content-length", str(len(payload)).encode())]}
    sent = False
    status = 0

    async def receive() -> dict[str, Any]:
        nonlocal sent
        sent = True
        return {"type": "http.request", "body": payload, "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        nonlocal status
        if message["type"] == "http.response.start":
            status = message["status"]

    await app(scope, receive, send)
    return status


async def run(args: argparse.Namespace) -> None:
    settings = Settings.model_validate({"tenant": "bench", "sources": [
        {"id": "am", "kind": "alertmanager", "bearer_token": TOKEN, "rate_limit_per_second": 1e7,
         "alerts_per_second": 1e10}]})
    redis = redis_client(args.redis_url)
    with tempfile.TemporaryDirectory() as tmp:
        db = Database.create(f"sqlite:///{os.path.join(tmp, 'ira.db')}")
        await upgrade(db)
        commits = GroupCommit(db, SystemClock())
        lane = build_lane(settings, redis=redis, clock=SystemClock(), registry=CollectorRegistry(), outbox=commits,
                          redis_prefix=f"bench-edge-cpu-{uuid.uuid4().hex[:8]}:")
        try:
            for alerts in args.alerts:
                run_id = uuid.uuid4().hex[:8]
                requests = max(args.requests // alerts, args.concurrency * 4)
                bodies = [body(run_id, n, alerts) for n in range(requests + args.concurrency * 2)]
                best = None
                for repeat in range(args.repeats):
                    chunk = bodies[:args.concurrency * 2] if repeat == 0 else []  # warm-up once
                    for payload in chunk:
                        await post(lane.app, payload)
                    todo = [body(f"{run_id}r{repeat}", n, alerts) for n in range(requests)]
                    slots = asyncio.Semaphore(args.concurrency)

                    async def one(payload: bytes, slots: asyncio.Semaphore = slots) -> int:
                        async with slots:
                            return await post(lane.app, payload)

                    cpu, wall = time.process_time(), time.perf_counter()
                    statuses = await asyncio.gather(*(one(p) for p in todo))
                    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
                    assert all(s == 202 for s in statuses), sorted(set(statuses))
                    per_alert = cpu / (requests * alerts) * 1e6
                    best = per_alert if best is None else min(best, per_alert)
                    print(json.dumps({"bench": "edge_cpu", "alerts_per_request": alerts, "requests": requests,
                                      "concurrency": args.concurrency, "repeat": repeat,
                                      "cpu_us_per_alert": round(per_alert, 1),
                                      "cpu_us_per_request": round(cpu / requests * 1e6, 1),
                                      "alerts_per_s": round(requests * alerts / wall),
                                      "commits": commits.commits, "load1": round(os.getloadavg()[0], 2)}), flush=True)
                print(json.dumps({"bench": "edge_cpu", "alerts_per_request": alerts, "min_cpu_us_per_alert":
                                  round(best or 0, 1)}), flush=True)
        finally:
            others = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            await asyncio.wait(others, timeout=5) if others else None  # the last marks
            await redis.aclose()
            await db.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--redis-url", default="redis://127.0.0.1:6379/0")
    parser.add_argument("--requests", type=int, default=3000, help="alerts per repeat (at least 4 rounds of requests)")
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--alerts", default="1,100", help="alerts per request, comma-separated")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    args.alerts = [int(a) for a in args.alerts.split(",")]
    asyncio.run(run(args))


if __name__ == "__main__":
    main()
