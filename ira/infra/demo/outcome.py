"""After ``ira dev --demo`` played the bundled incident: say honestly what became of it.

A second ``make run`` on the same data directory replays an alert whose group already has a
run: triage hands it to that run (still open) or ignores it (``cooldown``, the run is over). No
new run, nothing new to approve; silence there reads as "broken". This reads the API (as any
client would) and says where the demo's run is and how to start over.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from datetime import datetime, timedelta
from typing import Any, TypeVar

import httpx

T = TypeVar("T")

WAIT = timedelta(seconds=60)
"""How long to look for the demo's run: on a busy 2-core machine the first run can take 20 s and more."""


async def explain_demo(
    client: httpx.AsyncClient, *, url: str, since: datetime, say: Callable[[str], None], wait: timedelta = WAIT,
) -> None:
    """Wait (bounded) for the demo's run; if triage ignored the alert instead, say why and where."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + wait.total_seconds()
    last = Unanswered()
    try:
        while loop.time() < deadline:
            run = await last.asking(_run_since(client, since, last))
            if run is not None:
                say(f"demo      run started: {url}/runs/{run['run_id']} (its ticket draft will wait for your approval)")
                return
            evaluation = await last.asking(_evaluation_since(client, since))
            if evaluation is not None:
                say(_already(url, evaluation))
                say("          to start over: stop ira, `rm -rf .ira` and `make run` again "
                    "(or `.venv/bin/ira dev --demo --fresh`)")
                return
            await asyncio.sleep(0.5)  # polling the API with a deadline, not synchronisation
    except asyncio.CancelledError:  # ira stopped first: say what the demo had seen, not nothing
        say(f"demo      stopped before the demo's run was seen{last.said()}")
        raise
    say(f"demo      no run yet; watch {url}/{last.said()}")


class Unanswered:
    """The API's last answer that was not a usable one (an error status, a timeout): the demo
    keeps asking until its deadline, and says this when it gives up instead of staying silent."""

    def __init__(self) -> None:
        self.problem = ""
        self.listed = ""

    async def asking(self, question: Awaitable[T]) -> T | None:
        try:
            return await question
        except httpx.HTTPStatusError as exc:
            self.problem = f"{exc.request.method} {exc.request.url.path} answered {exc.response.status_code}"
        except httpx.TransportError as exc:  # a slow answer on a busy machine: ask again until the deadline
            self.problem = f"{exc.request.method} {exc.request.url.path}: {type(exc).__name__}"
        return None

    def said(self) -> str:
        seen = [part for part in (self.listed, self.problem and f"last problem: {self.problem}") if part]
        return f" ({'; '.join(seen)})" if seen else ""


def _already(url: str, evaluation: dict[str, Any]) -> str:
    run_id = evaluation["basis"].get("run_id")
    if evaluation["decision"] == "deliver" and run_id:
        return (f"demo      the demo incident is already open: the replayed alert went to its run, "
                f"{url}/runs/{run_id}")
    return (f"demo      the demo incident already ran (triage: ignored, {evaluation['reason']}); open it at "
            f"{url}/incidents/{evaluation['incident_id']}")


async def _run_since(client: httpx.AsyncClient, since: datetime, last: Unanswered) -> dict[str, Any] | None:
    runs = _ok(await client.get("/v1/runs", params={"limit": 20}))["runs"]
    newest = f", the newest created {runs[0]['created_at']}" if runs else ""
    last.listed = f"{len(runs)} run(s) listed{newest}; looking for one created since {since.isoformat()}"
    return next((r for r in runs if datetime.fromisoformat(r["created_at"]) >= since), None)


async def _evaluation_since(client: httpx.AsyncClient, since: datetime) -> dict[str, Any] | None:
    """Triage's newest decision about the replayed alerts that did not start a run."""
    for incident in _ok(await client.get("/v1/incidents", params={"limit": 20}))["incidents"]:
        detail = _ok(await client.get(f"/v1/incidents/{incident['incident_id']}"))
        for evaluation in reversed(detail["evaluations"]):
            if datetime.fromisoformat(evaluation["at"]) >= since and evaluation["decision"] != "create_run":
                return {**evaluation, "incident_id": incident["incident_id"]}
    return None


def _ok(response: httpx.Response) -> dict[str, Any]:
    """The answer's JSON; an error status raises (an error body has no runs: not "no run yet")."""
    response.raise_for_status()
    body: dict[str, Any] = response.json()
    return body
