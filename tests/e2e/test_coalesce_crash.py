"""Coalesced updates survive ``ira dev`` killed whole mid-interval: the follow-ups folded into a
run's pending update (in SQL) reach the run after a restart, each counted once, the update
sent once (the embedded broker forgot everything; the store did not)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from tests.e2e.devprocess import Burst, DevProcess, until_triaged
from tests.eventually import eventually
from tests.sources.harness import distinct_alert

pytestmark = pytest.mark.slow
ADMIN = {"authorization": "Bearer dev-admin-token"}
INTERVAL = "20s"


def with_interval(dev: DevProcess) -> DevProcess:
    path = Path(dev.env["IRA_CONFIG"])
    config = yaml.safe_load(path.read_text())
    config["triage"]["update_interval"] = INTERVAL
    path.write_text(yaml.safe_dump(config))
    return dev


async def post(dev: DevProcess, numbers: range) -> set[str]:
    burst = Burst()
    await burst.post(dev.base_url, [distinct_alert(n) for n in numbers], connections=2)
    assert len(burst.answered) == len(numbers), burst.refused
    return set(burst.answered)


async def updates(dev: DevProcess, run_id: str) -> list[dict[str, Any]]:
    async with httpx.AsyncClient(base_url=dev.base_url, headers=ADMIN, timeout=10) as client:
        events = (await client.get(f"/v1/runs/{run_id}/events")).json()["events"]
    return [e["data"] for e in events if e["type"] == "INCIDENT_UPDATED"]


async def the_run(dev: DevProcess) -> str:
    async with httpx.AsyncClient(base_url=dev.base_url, headers=ADMIN, timeout=10) as client:
        runs = (await client.get("/v1/runs")).json()["runs"]
    assert len(runs) == 1, runs
    return str(runs[0]["run_id"])


async def test_follow_ups_folded_before_a_kill_reach_the_run_once_after_the_restart(tmp_path: Path) -> None:
    dev = with_interval(DevProcess.on(tmp_path))
    await dev.start()
    try:
        # Given a run for an incident, told of its first follow-up at once
        await post(dev, range(0, 1))
        run_id = await eventually(lambda: the_run(dev), timeout=60, message="the incident's run")
        await post(dev, range(1, 2))
        await eventually(lambda: updates(dev, run_id), timeout=30, message="the first update")
        # and five more follow-ups triaged (folded into the next update, due in 20 s)
        folded = await post(dev, range(2, 7))
        await until_triaged(dev.database_url, folded, timeout=60)
        assert len(await updates(dev, run_id)) == 1
        # When the whole of ira is SIGKILLed inside the interval, and started again
        dev.kill()
        await dev.start()

        # Then the run gets the pending update once, with every follow-up in it
        async def second() -> list[dict[str, Any]]:
            found = await updates(dev, run_id)
            assert len(found) >= 2
            return found

        found = await eventually(second, timeout=90, interval=1.0, message="the update folded before the kill")
    finally:
        await dev.stop()
    assert [(u["seq"], u["events"], u["joined"]) for u in found] == [(1, 1, 1), (2, 5, 5)]
    assert found[1]["trigger"] == "interval" and not found[1]["substantive"]
