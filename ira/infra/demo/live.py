"""Processes of the live demo for scripts (recorder, benchmark): spawn-and-wait, a webhook capture.

Everything binds 127.0.0.1. Processes are killed when the caller's exit stack closes.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import socket
import sys
import time
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from ira.infra.demo import DEMO_DIR, SERVICE


async def _answers(url: str) -> bool:
    try:
        async with httpx.AsyncClient(timeout=2) as client:
            return (await client.get(url)).status_code == 200
    except httpx.HTTPError:
        return False


async def spawn(stack: AsyncExitStack, argv: list[str], log: Path, *, ready: str, timeout: float = 60) -> None:
    """Start ``argv`` (output to ``log``), wait until ``ready`` answers 200, kill it on exit."""
    out = open(log, "wb")  # noqa: SIM115 - closed by the stack after the process
    process = await asyncio.create_subprocess_exec(*argv, stdout=out, stderr=out)

    async def stop() -> None:
        if process.returncode is None:
            process.kill()
        await process.wait()
        out.close()

    stack.push_async_callback(stop)
    deadline = time.monotonic() + timeout
    while not await _answers(ready):
        if process.returncode is not None or time.monotonic() > deadline:
            raise RuntimeError(f"{argv[0]} did not become ready (see {log})")
        await asyncio.sleep(0.2)


@dataclass
class Capture:
    """Alertmanager webhook bodies as they arrived."""

    received: list[dict[str, Any]] = field(default_factory=list)
    _arrived: asyncio.Event = field(default_factory=asyncio.Event)

    def app(self) -> Starlette:
        async def webhook(request: Request) -> JSONResponse:
            self.received.append({"received_at": datetime.now(UTC), "payload": await request.json()})
            self._arrived.set()
            return JSONResponse({"accepted": 1}, status_code=202)

        return Starlette(routes=[Route("/v1/sources/alertmanager/{source}", webhook, methods=["POST"])])

    async def wait_for(self, alert: str, *, timeout: float) -> dict[str, Any]:
        """The first captured body with ``alert`` firing."""
        deadline = time.monotonic() + timeout
        while True:
            for body in self.received:
                if any(a["labels"].get("alertname") == alert and a["status"] == "firing"
                       for a in body["payload"].get("alerts", [])):
                    return body
            self._arrived.clear()
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"{alert} did not fire within {timeout:g}s")
            try:
                await asyncio.wait_for(self._arrived.wait(), left)
            except TimeoutError:
                continue


@asynccontextmanager
async def start_capture(capture: Capture, port: int = 0) -> AsyncIterator[str]:
    import socket

    if port == 0:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = int(s.getsockname()[1])
    server = uvicorn.Server(uvicorn.Config(capture.app(), host="127.0.0.1", port=port, log_level="warning",
                                           lifespan="off"))
    server.install_signal_handlers = lambda: None  # type: ignore[attr-defined]
    task = asyncio.create_task(server.serve())
    try:
        while not server.started:
            await asyncio.sleep(0.05)
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        await task


@dataclass(frozen=True)
class LiveDemo:
    """Where the running demo systems are."""

    service_url: str
    log_path: Path
    prometheus_url: str
    alertmanager_url: str


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def missing_binaries() -> list[str]:
    """Debian packages the live demo needs and this machine lacks."""
    wanted = {"prometheus": "prometheus", "prometheus-alertmanager": "prometheus-alertmanager"}
    return [package for binary, package in wanted.items() if shutil.which(binary) is None]


async def start_live_demo(
    stack: AsyncExitStack, home: Path, *, webhook_base: str, service_args: tuple[str, ...] = (),
) -> LiveDemo:
    """order-service, Alertmanager (webhook -> ``webhook_base``), Prometheus (demo rules -> Alertmanager).

    Every process binds 127.0.0.1 and is killed when ``stack`` closes.
    """
    service_port, am_port, prom_port = free_port(), free_port(), free_port()
    log = home / "order-service.jsonl"
    await spawn(stack, [sys.executable, "-m", "ira.infra.demo.order_service", "--port", str(service_port),
                        "--log", str(log), *service_args], home / "service.out",
                ready=f"http://127.0.0.1:{service_port}/healthz")
    am_config = home / "alertmanager.yml"
    am_config.write_text((DEMO_DIR / "alertmanager.yml").read_text().replace(
        "http://127.0.0.1:8080/v1/sources/alertmanager/am", f"{webhook_base}/v1/sources/alertmanager/am"))
    await spawn(stack, [shutil.which("prometheus-alertmanager") or "alertmanager", f"--config.file={am_config}",
                        f"--storage.path={home / 'am'}", f"--web.listen-address=127.0.0.1:{am_port}",
                        "--cluster.listen-address="], home / "am.out", ready=f"http://127.0.0.1:{am_port}/-/ready")
    prom_config = home / "prometheus.yml"
    prom_config.write_text(json.dumps({
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "alerting": {"alertmanagers": [{"static_configs": [{"targets": [f"127.0.0.1:{am_port}"]}]}]},
        "rule_files": [str(DEMO_DIR / "prometheus" / "rules.yml")],
        "scrape_configs": [{"job_name": SERVICE, "static_configs": [{"targets": [f"127.0.0.1:{service_port}"]}]}]}))
    await spawn(stack, ["prometheus", f"--config.file={prom_config}", f"--storage.tsdb.path={home / 'tsdb'}",
                        f"--web.listen-address=127.0.0.1:{prom_port}"], home / "prom.out",
                ready=f"http://127.0.0.1:{prom_port}/-/ready")
    return LiveDemo(service_url=f"http://127.0.0.1:{service_port}", log_path=log,
                    prometheus_url=f"http://127.0.0.1:{prom_port}", alertmanager_url=f"http://127.0.0.1:{am_port}")
