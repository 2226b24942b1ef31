"""`make run`'s promise, as a person would check it: the bundled incident becomes a run that
waits for approval; approving it creates INC-1 and completes the run."""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

import httpx

from tests.eventually import eventually
from tests.processes import free_port, ira_command

ADMIN = {"authorization": "Bearer dev-admin-token"}


async def test_ira_dev_demo_plays_the_bundle_to_an_approved_ticket(tmp_path: Path) -> None:
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("IRA_")}
    env.update(IRA_DATA_DIR=str(tmp_path / "data"), IRA_HTTP_PORT=str(port))
    log = (tmp_path / "dev.log").open("w")
    proc = subprocess.Popen([ira_command(), "dev", "--demo"], cwd=tmp_path, env=env, stdout=log,
                            stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    try:
        async with httpx.AsyncClient(base_url=base, headers=ADMIN, timeout=5) as client:
            async def waiting_run() -> dict | None:  # type: ignore[type-arg]
                assert proc.poll() is None, (tmp_path / "dev.log").read_text()[-3000:]
                try:
                    listed = (await client.get("/v1/runs", params={"state": "waiting"})).json()["runs"]
                except httpx.TransportError:
                    return None
                return listed[0] if listed else None

            run = await eventually(waiting_run, timeout=90, interval=0.5, message="a run waiting for approval")
            assert run["wait_kind"] == "approval"
            detail = (await client.get(f"/v1/runs/{run['run_id']}")).json()
            assert {s["step_id"]: s["state"] for s in detail["steps"]}["metrics"] == "done"
            approval = next(a for a in detail["approvals"] if a["state"] == "pending")
            decided = await client.post(f"/v1/approvals/{approval['approval_id']}/decision",
                                        json={"decision": "approve", "reason": "demo test"})
            assert decided.status_code == 200, decided.text

            async def completed() -> bool:
                return (await client.get(f"/v1/runs/{run['run_id']}")).json()["state"] == "completed"

            await eventually(completed, timeout=60, interval=0.5, message="the run completes")
            tickets = (await client.get("/v1/tickets")).json()["tickets"]
            assert [t["key"] for t in tickets] == ["INC-1"]
            assert "order-service" in tickets[0]["title"]
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        log.close()
