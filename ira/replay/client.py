"""``ira replay --bundle DIR``: send a bundle to a running ira, follow it, print the comparison.

Exit codes: 0 the replay finished and its expectations (if any) are met; 1 they are not (the
unmet ones are listed); 2 it could not run (invalid bundle, ira unreachable or refusing, the
replay failed). The last line printed is always a one-line verdict.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

import httpx

from ira.infra.bundle import BundleError, load_bundle
from ira.replay.models import ReplayRequest, ReplayView

Say = Callable[[str], None]
POLL = 0.5
"""Seconds between two looks at the replay (a person watching, not a synchronisation)."""


def request_of(directory: Path, *, speed: float) -> ReplayRequest:
    bundle = load_bundle(directory)
    return ReplayRequest(manifest=bundle.manifest, events=bundle.events, observations=bundle.observations,
                         runbooks=bundle.runbooks, outcome=bundle.outcome, expectations=bundle.expectations,
                         speed=speed)


async def replay_bundle(directory: Path, *, url: str, token: str, speed: float, say: Say,
                        timeout: float = 900.0) -> int:
    try:
        body = request_of(directory, speed=speed)
    except BundleError as exc:
        for problem in exc.problems:
            say(f"{directory}/{problem}")
        say(f"ERROR: {directory} is not a valid bundle ({len(exc.problems)} problem(s)); nothing replayed")
        return 2
    async with httpx.AsyncClient(base_url=url, timeout=30, headers={"authorization": f"Bearer {token}"}) as api:
        try:
            view = await _start(api, body)
            say(f"replay    {view.replay_id}: {body.manifest.bundle_id} into staging of {url}")
            view = await _follow(api, view, say=say, timeout=timeout)
        except (httpx.HTTPError, ReplayRefusedError) as exc:
            say(f"ERROR: the replay could not run: {exc}")
            return 2
    return show(view, say)


class ReplayRefusedError(Exception):
    pass


async def _start(api: httpx.AsyncClient, body: ReplayRequest) -> ReplayView:
    response = await api.post("/v1/replays", content=body.model_dump_json(),
                              headers={"content-type": "application/json"})
    if response.status_code != 202:
        raise ReplayRefusedError(f"POST /v1/replays answered {response.status_code}: {response.text[:500]}")
    return ReplayView.model_validate_json(response.content)


async def _follow(api: httpx.AsyncClient, view: ReplayView, *, say: Say, timeout: float) -> ReplayView:
    shown = ""
    for _ in range(int(timeout / POLL)):
        line = (f"progress  events {view.events_sent}/{view.events_total}, run {view.run_state or '-'}, "
                f"branches finished {view.branches_finished}/{view.branches_total or '-'}")
        if line != shown:
            say(line)
            shown = line
        if view.state in ("finished", "failed"):
            return view
        await asyncio.sleep(POLL)
        view = await _look(api, view)
    raise ReplayRefusedError(f"replay {view.replay_id} did not finish within {timeout:g}s")


def _cut(text: str, limit: int = 160) -> str:
    """A comparison line stays readable; the full texts are in ``GET /v1/replays/{id}``."""
    return text if len(text) <= limit else text[:limit - 1] + "…"


async def _look(api: httpx.AsyncClient, view: ReplayView) -> ReplayView:
    """The replay now; a busy or restarting ira (5xx, no answer) is asked again on the next look."""
    try:
        response = await api.get(f"/v1/replays/{view.replay_id}")
    except httpx.TransportError:
        return view
    if response.status_code >= 500:
        return view
    if response.status_code != 200:
        raise ReplayRefusedError(f"GET /v1/replays/{view.replay_id} answered {response.status_code}")
    return ReplayView.model_validate_json(response.content)


def show(view: ReplayView, say: Say) -> int:
    """The comparison, the unmet expectations, then the verdict as the last line."""
    report = view.report
    if view.state != "finished" or report is None:
        say(f"ERROR: replay {view.replay_id} failed: {view.error}")
        return 2
    width = max(len(r.aspect) for r in report.comparison.rows)
    say(f"{'aspect':{width}}  same  original | replay")
    for row in report.comparison.rows:
        say(f"{row.aspect:{width}}  {'yes ' if row.same else 'NO  '}  {_cut(row.original)} | {_cut(row.replay)}")
    for line in report.comparison.draft_diff:
        say(f"  {line}")
    for unmet in report.unmet:
        say(f"unmet     {unmet}")
    say(report.verdict)
    return 0 if report.passed else 1
