"""Real Prometheus and the demo order-service as processes for tests (127.0.0.1 only).

``start_prometheus`` runs the Debian ``prometheus`` binary with its own TSDB under the test's
directory and kills it afterwards; a missing binary skips locally and fails in CI.
"""

from __future__ import annotations

import asyncio
import shutil
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import yaml

from tests.eventually import eventually
from tests.processes import free_port
from tests.services import require_service


def prometheus_binary() -> str:
    found = shutil.which("prometheus") or ("/usr/bin/prometheus" if Path("/usr/bin/prometheus").exists() else None)
    if found is None:
        require_service("prometheus", "no prometheus binary (apt-get install prometheus)")
    return str(found)


def scrape_config(targets: dict[str, str], *, interval: str = "1s", rule_files: list[str] | None = None) -> dict:
    """A config scraping each ``job -> host:port`` every ``interval``."""
    return {"global": {"scrape_interval": interval, "evaluation_interval": interval},
            "rule_files": rule_files or [],
            "scrape_configs": [{"job_name": job, "static_configs": [{"targets": [target]}]}
                               for job, target in targets.items()]}


async def _ready(url: str) -> bool:
    try:
        async with httpx.AsyncClient(timeout=2) as client:
            return (await client.get(f"{url}/-/ready")).status_code == 200
    except httpx.HTTPError:
        return False


async def _stop(process: asyncio.subprocess.Process) -> None:
    if process.returncode is None:
        process.kill()
    await process.wait()


@asynccontextmanager
async def start_prometheus(tmp_path: Path, config: dict[str, Any] | str) -> AsyncIterator[str]:
    """Start Prometheus with ``config`` (a dict or YAML text); yield its URL; kill it at the end."""
    binary = prometheus_binary()
    home = tmp_path / f"prometheus-{free_port()}"
    home.mkdir(parents=True)
    (home / "prometheus.yml").write_text(config if isinstance(config, str) else yaml.safe_dump(config))
    port = free_port()
    log = open(home / "prometheus.log", "wb")  # noqa: SIM115 - closed after the process ends
    process = await asyncio.create_subprocess_exec(
        binary, f"--config.file={home / 'prometheus.yml'}", f"--storage.tsdb.path={home / 'tsdb'}",
        f"--web.listen-address=127.0.0.1:{port}", "--log.level=warn", stdout=log, stderr=log)
    url = f"http://127.0.0.1:{port}"
    try:
        await eventually(lambda: _ready(url), timeout=30, interval=0.2, message="prometheus ready")
        yield url
    finally:
        await _stop(process)
        log.close()


@asynccontextmanager
async def start_order_service(tmp_path: Path, *, rps: float = 40.0, seed: int = 7) -> AsyncIterator[tuple[str, Path]]:
    """The demo order-service as a process; yields its URL and its JSON-lines log file."""
    port, log_path = free_port(), tmp_path / "order-service.jsonl"
    out = open(tmp_path / "order-service.out", "wb")  # noqa: SIM115
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "ira.infra.demo.order_service", "--port", str(port), "--log", str(log_path),
        "--rps", str(rps), "--seed", str(seed), stdout=out, stderr=out)
    url = f"http://127.0.0.1:{port}"

    async def up() -> bool:
        try:
            async with httpx.AsyncClient(timeout=2) as client:
                return (await client.get(f"{url}/healthz")).status_code == 200
        except httpx.HTTPError:
            return False

    try:
        await eventually(up, timeout=20, interval=0.1, message="order-service up")
        yield url, log_path
    finally:
        await _stop(process)
        out.close()
