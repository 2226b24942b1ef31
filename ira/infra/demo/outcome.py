"""After ``ira dev --demo`` played the bundled incident: say honestly what became of it.

A second ``make run`` on the same data directory replays an alert whose group already has a
run: triage hands it to that run (still open) or ignores it (``cooldown``, the run is over). No
new run, nothing new to approve; silence there reads as "broken". This reads the API (as any
client would) and says where the demo's run is and how to start over.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

import httpx

WAIT = timedelta(seconds=60)
"""How long to look for the demo's run: on a busy 2-core machine the first run can take 20 s and more."""


async def explain_demo(
    client: httpx.AsyncClient, *, url: str, since: datetime, say: Callable[[str], None], wait: timedelta = WAIT,
) -> None:
    """Wait (bounded) for the demo's run; if triage ignored the alert instead, say why and where."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + wait.total_seconds()
    while loop.time() < deadline:
        try:
            run = await _run_since(client, since)
        except httpx.TransportError:  # a slow answer on a busy machine: ask again until the deadline
            await asyncio.sleep(0.5)
            continue
        if run is not None:
            say(f"demo      run started: {url}/runs/{run['run_id']} (its ticket draft will wait for your approval)")
            return
        try:
            evaluation = await _evaluation_since(client, since)
        except httpx.TransportError:
            evaluation = None
        if evaluation is not None:
            say(_already(url, evaluation))
            say("          to start over: stop ira, `rm -rf .ira` and `make run` again "
                "(or `.venv/bin/ira dev --demo --fresh`)")
            return
        await asyncio.sleep(0.5)  # polling the API with a deadline, not synchronisation
    say(f"demo      no run yet; watch {url}/")


def _already(url: str, evaluation: dict[str, Any]) -> str:
    run_id = evaluation["basis"].get("run_id")
    if evaluation["decision"] == "deliver" and run_id:
        return (f"demo      the demo incident is already open: the replayed alert went to its run, "
                f"{url}/runs/{run_id}")
    return (f"demo      the demo incident already ran (triage: ignored, {evaluation['reason']}); open it at "
            f"{url}/incidents/{evaluation['incident_id']}")


async def _run_since(client: httpx.AsyncClient, since: datetime) -> dict[str, Any] | None:
    runs = (await client.get("/v1/runs", params={"limit": 20})).json().get("runs", [])
    return next((r for r in runs if datetime.fromisoformat(r["created_at"]) >= since), None)


async def _evaluation_since(client: httpx.AsyncClient, since: datetime) -> dict[str, Any] | None:
    """Triage's newest decision about the replayed alerts that did not start a run."""
    for incident in (await client.get("/v1/incidents", params={"limit": 20})).json().get("incidents", []):
        detail = (await client.get(f"/v1/incidents/{incident['incident_id']}")).json()
        for evaluation in reversed(detail.get("evaluations", [])):
            if datetime.fromisoformat(evaluation["at"]) >= since and evaluation["decision"] != "create_run":
                return {**evaluation, "incident_id": incident["incident_id"]}
    return None
