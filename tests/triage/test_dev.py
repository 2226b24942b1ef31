"""The whole walk in ``ira dev``: a real Alertmanager payload in, an incident with its
evaluations out, the faust noise worker running beside it and gone after Ctrl-C."""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

import httpx
import pytest

from tests.eventually import eventually
from tests.processes import alive, descendants_and_holders, free_port, ira_command

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"  # copies of ../shared/fixtures
ADMIN = {"Authorization": "Bearer dev-admin-token"}
pytestmark = pytest.mark.slow


def is_noise_worker(pid: int) -> bool:
    try:
        return b"ira.triage.noise_worker" in Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False


def env_for(tmp_path: Path, port: int) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("IRA_")}
    env.update(IRA_DATA_DIR=str(tmp_path / "data"), IRA_HTTP_PORT=str(port))
    return env


async def incidents(base: str) -> list[dict]:
    async with httpx.AsyncClient(base_url=base, headers=ADMIN) as client:
        return (await client.get("/v1/incidents", timeout=5)).json()["incidents"]


async def test_ira_dev_turns_an_alertmanager_webhook_into_an_incident(tmp_path: Path) -> None:
    if not (FIXTURES / "alertmanager_payload.json").exists():
        pytest.skip("the shared Alertmanager fixtures are not on this machine")
    port = free_port()
    base, log = f"http://127.0.0.1:{port}", (tmp_path / "dev.log").open("w")
    proc = subprocess.Popen([ira_command(), "dev"], cwd=tmp_path, env=env_for(tmp_path, port), stdout=log,
                            stderr=subprocess.STDOUT)
    try:
        await eventually(lambda: _ready(base, proc), timeout=60, interval=0.25, message="/readyz 200")
        noise = {p for p in descendants_and_holders(proc.pid, str(tmp_path)) if is_noise_worker(p)}
        async with httpx.AsyncClient(base_url=base) as client:
            posted = await client.post("/v1/sources/alertmanager/am", headers={"Authorization": "Bearer dev-am-token"},
                                       content=(FIXTURES / "alertmanager_payload.json").read_bytes())
        [incident] = await eventually(lambda: incidents(base), timeout=30, message="the incident")
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=30) == 0
        await eventually(lambda: not alive(noise), timeout=10, message=f"noise worker {noise} gone")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        log.close()

    assert posted.status_code == 202 and noise, (tmp_path / "dev.log").read_text()[-2000:]
    assert (incident["title"], incident["service"], incident["status"]) == (
        "High error rate on checkout", "checkout", "open")


async def _ready(base: str, proc: subprocess.Popen[bytes]) -> bool:
    assert proc.poll() is None, "ira dev exited"
    try:
        async with httpx.AsyncClient() as client:
            return (await client.get(f"{base}/readyz", timeout=2)).status_code == 200
    except httpx.TransportError:
        return False
