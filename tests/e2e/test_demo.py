"""`make run`'s promise, as a person would check it: the bundled incident becomes a run that
waits for approval; approving it creates INC-1 and completes the run."""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

import httpx
import pytest

from tests.eventually import eventually
from tests.processes import free_port, ira_command

ADMIN = {"authorization": "Bearer dev-admin-token"}


@pytest.mark.timeout(360)  # the demo's line (<= 120 s), the waiting run, approval, completion
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

            def demo_said_run_started() -> bool:  # a person reads this line first, then approves
                assert proc.poll() is None, (tmp_path / "dev.log").read_text()[-3000:]
                return "demo      run started:" in (tmp_path / "dev.log").read_text()

            try:
                await eventually(demo_said_run_started, timeout=120, interval=0.5)
            except AssertionError:
                shown = (tmp_path / "dev.log").read_text()
                raise AssertionError([line for line in shown.splitlines() if line.startswith("demo ")]) from None
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
        shown = (tmp_path / "dev.log").read_text()
        assert "log in with the token dev-admin-token" in shown and "ira dev --fresh" in shown
        said = [line for line in shown.splitlines() if line.startswith("demo ")]
        assert any(line.startswith("demo      run started:") for line in said), said
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        log.close()


async def play_demo_once(tmp_path: Path, env: dict[str, str], out: Path) -> None:
    """``ira dev --demo`` until it says what became of the demo, then Ctrl-C."""
    with out.open("w") as log:
        proc = subprocess.Popen([ira_command(), "dev", "--demo"], cwd=tmp_path, env=env, stdout=log,
                                stderr=subprocess.STDOUT)
        try:
            def told() -> bool:
                assert proc.poll() is None, out.read_text()[-3000:]
                shown = out.read_text()
                return any(said in shown for said in ("demo      run started:", "demo      the demo incident",
                                                      "demo      no run yet"))

            await eventually(told, timeout=120, interval=0.5, message=f"{out.name}: the demo says what happened")
            proc.send_signal(signal.SIGINT)
            assert proc.wait(timeout=30) == 0
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()


@pytest.mark.timeout(420)  # two whole `ira dev` lives, each ~30 s on an idle 2-core machine
async def test_a_second_demo_on_the_same_data_says_it_already_ran(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("IRA_")}
    env.update(IRA_DATA_DIR=str(tmp_path / "data"), IRA_HTTP_PORT=str(free_port()))
    await play_demo_once(tmp_path, env, tmp_path / "first.log")
    await play_demo_once(tmp_path, env, tmp_path / "second.log")
    assert "demo      run started:" in (tmp_path / "first.log").read_text()
    second = (tmp_path / "second.log").read_text()
    assert "the demo incident is already open: the replayed alert went to its run" in second  # it still waits
    assert "rm -rf .ira" in second and "run started" not in second
