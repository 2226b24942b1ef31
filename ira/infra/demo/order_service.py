"""A small order-service to investigate: Prometheus metrics, JSON logs, and a fault to inject.

    python -m ira.infra.demo.order_service --port 8081 --log /tmp/order-service.jsonl

It makes its own traffic (``--rps`` simulated requests per second), so metrics move with no
load generator. ``POST /admin/deploy {"version": "v3"}`` (or ``--fault-after N``) deploys v3,
after which the DB connection pool saturates: p95 latency goes from ~210 ms to ~2.1 s,
requests time out waiting for a connection (logged as errors) and the error ratio rises.
Deploying ``v2`` again restores the healthy behaviour. With ``--ira-url`` each deploy is also
reported to ira as a change event (``POST /v1/sources/change/<source>``).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import random
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import IO, Any

import httpx
import uvicorn
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

SERVICE = "order-service"
POOL_SIZE = 20
BUCKETS = (0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.4, 0.5, 0.75, 1.0, 1.5, 2.0, 2.5, 3.0, 4.0, 5.0, 10.0)
FAULTY_VERSIONS = frozenset({"v3"})
POOL_WAIT_LIMIT_MS = 2500


class Instruments:
    """The service's metrics on a registry of its own."""

    def __init__(self) -> None:
        self.registry = r = CollectorRegistry()
        self.latency = Histogram("http_request_duration_seconds", "Request latency", ["service", "route", "version"],
                                 buckets=BUCKETS, registry=r)
        self.requests = Counter("http_requests_total", "Requests by status", ["service", "route", "status", "version"],
                                registry=r)
        self.pool_in_use = Gauge("db_pool_connections_in_use", "DB connections checked out", ["service"], registry=r)
        self.pool_max = Gauge("db_pool_connections_max", "DB pool size", ["service"], registry=r)
        self.version = Gauge("app_version_info", "Running version (1 for the current one)", ["service", "version"],
                             registry=r)
        self.pool_max.labels(service=SERVICE).set(POOL_SIZE)


@dataclass
class OrderService:
    log: IO[str]
    rng: random.Random
    version: str = "v2"
    metrics: Instruments = field(default_factory=Instruments)
    deploys: list[dict[str, Any]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.metrics.version.labels(service=SERVICE, version=self.version).set(1)

    @property
    def faulty(self) -> bool:
        return self.version in FAULTY_VERSIONS

    def write(self, level: str, message: str, **fields: Any) -> None:
        record = {"ts": datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z"),
                  "level": level, "service": SERVICE, "version": self.version, "message": message, **fields}
        self.log.write(json.dumps(record) + "\n")

    def deploy(self, version: str, *, actor: str, commit: str) -> dict[str, Any]:
        self.metrics.version.remove(SERVICE, self.version)
        self.version = version
        self.metrics.version.labels(service=SERVICE, version=version).set(1)
        change = {"service": SERVICE, "version": version, "commit": commit, "actor": actor,
                  "at": datetime.now(UTC).isoformat().replace("+00:00", "Z"), "id": f"deploy-{uuid.uuid4().hex[:12]}",
                  "description": f"rolling deploy of {SERVICE} {version}"}
        self.deploys.append(change)
        self.write("info", f"deployed {SERVICE} {version} (commit {commit}) by {actor}", event="deploy")
        return change

    def request(self, route: str = "/orders/{id}") -> float:
        """One simulated request: sample its latency and outcome, record metrics and logs."""
        latency, status = self._sample()
        order = f"ord_{self.rng.randrange(16**10):010x}"
        self.metrics.latency.labels(SERVICE, route, self.version).observe(latency)
        self.metrics.requests.labels(SERVICE, route, str(status), self.version).inc()
        if status == 503:
            self.write("error", f"db pool timeout: could not acquire connection within {POOL_WAIT_LIMIT_MS}ms "
                                f"(pool size {POOL_SIZE}, in use {POOL_SIZE})", order_id=order, status=status)
        elif status == 500:
            self.write("error", f"payment gateway returned 502 for order {order}", order_id=order, status=status)
        elif self.faulty and latency > 1.5 and self.rng.random() < 0.2:
            self.write("warning", f"slow query: SELECT * FROM orders WHERE id = $1 took {int(latency * 900)}ms",
                       order_id=order)
        elif self.rng.random() < 0.03:
            self.write("info", f"GET /orders/{order} {status} in {int(latency * 1000)}ms", order_id=order)
        return latency

    def _sample(self) -> tuple[float, int]:
        if not self.faulty:
            latency = 0.08 + self.rng.expovariate(1 / 0.043)  # p95 ~ 0.21 s
            return latency, 500 if self.rng.random() < 0.002 else 200
        latency = 0.5 + self.rng.expovariate(1 / 0.53)  # p95 ~ 2.1 s: waiting for a connection
        if latency * 1000 > POOL_WAIT_LIMIT_MS or self.rng.random() < 0.05:
            return POOL_WAIT_LIMIT_MS / 1000, 503
        return latency, 200

    def tick(self, count: int) -> None:
        for _ in range(count):
            self.request()
        in_use = POOL_SIZE if self.faulty else self.rng.randint(4, 9)
        self.metrics.pool_in_use.labels(service=SERVICE).set(in_use)
        self.log.flush()


async def traffic(service: OrderService, rps: float, stop: asyncio.Event) -> None:
    """Simulated load: ``rps`` requests per second in ten ticks a second."""
    carry = 0.0
    while not stop.is_set():
        carry += rps / 10
        service.tick(int(carry))
        carry -= int(carry)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), 0.1)


def build_app(service: OrderService, *, report: Any = None) -> Starlette:
    async def metrics(request: Request) -> Response:
        return Response(generate_latest(service.metrics.registry), media_type=CONTENT_TYPE_LATEST)

    async def health(request: Request) -> Response:
        return JSONResponse({"status": "ok", "version": service.version})

    async def order(request: Request) -> Response:
        latency = service.request()
        await asyncio.sleep(min(latency, 3.0))
        return JSONResponse({"order_id": request.path_params["order_id"], "version": service.version})

    async def deploy(request: Request) -> Response:
        body = await request.json()
        change = service.deploy(str(body.get("version", "v3")), actor=str(body.get("actor", "deploy-bot")),
                                commit=str(body.get("commit", uuid.uuid4().hex[:7])))
        if report is not None:
            await report(change)
        return JSONResponse(change)

    async def deploys(request: Request) -> Response:
        return JSONResponse({"deploys": service.deploys})

    return Starlette(routes=[Route("/metrics", metrics), Route("/healthz", health),
                             Route("/orders/{order_id}", order), Route("/admin/deploy", deploy, methods=["POST"]),
                             Route("/admin/deploys", deploys)])


def change_reporter(ira_url: str | None, source: str, token: str):  # type: ignore[no-untyped-def]
    """Send each deploy to ira's change source; a failure is logged to stdout, never fatal."""
    if not ira_url:
        return None

    async def report(change: dict[str, Any]) -> None:
        try:
            async with httpx.AsyncClient(timeout=5) as client:
                await client.post(f"{ira_url.rstrip('/')}/v1/sources/change/{source}", json=change,
                                  headers={"Authorization": f"Bearer {token}"})
        except httpx.HTTPError as exc:
            print(f"order-service: could not report the deploy to ira: {exc!r}", flush=True)

    return report


async def serve(args: argparse.Namespace) -> None:
    with open(args.log, "a", encoding="utf-8") as log:
        service = OrderService(log=log, rng=random.Random(args.seed), version=args.version)
        app = build_app(service, report=change_reporter(args.ira_url, args.change_source, args.change_token))
        server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=args.port, log_level="warning"))
        stop = asyncio.Event()
        load = asyncio.create_task(traffic(service, args.rps, stop))
        fault = asyncio.create_task(_fault_later(service, args.fault_after)) if args.fault_after else None
        try:
            await server.serve()
        finally:
            stop.set()
            for task in (load, fault):
                if task is not None:
                    task.cancel()
            await asyncio.gather(load, *(t for t in (fault,) if t), return_exceptions=True)


async def _fault_later(service: OrderService, seconds: float) -> None:
    await asyncio.sleep(seconds)
    service.deploy("v3", actor="deploy-bot", commit="7c1d9e2")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m ira.infra.demo.order_service", description=__doc__.split("\n")[0])
    parser.add_argument("--port", type=int, default=8081)
    parser.add_argument("--log", required=True, help="JSON-lines log file (appended)")
    parser.add_argument("--rps", type=float, default=40.0, help="simulated requests per second")
    parser.add_argument("--version", default="v2")
    parser.add_argument("--fault-after", type=float, default=None, help="deploy v3 after this many seconds")
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--ira-url", default=None, help="report deploys to this ira as change events")
    parser.add_argument("--change-source", default="changes")
    parser.add_argument("--change-token", default="dev-change-token")
    asyncio.run(serve(parser.parse_args(argv)))


if __name__ == "__main__":
    main()
