"""``ira record RUN_ID --out DIR`` and ``ira replay (--bundle DIR | --run RUN_ID)``: talk to a running ira.

``record`` fetches a run as a bundle and writes it as a directory. ``replay`` sends a bundle (a
directory, or a run the same ira records on the spot), follows it and prints the comparison.

Exit codes: 0 the replay finished and its expectations (if any) are met; 1 they are not (the
unmet ones are listed); 2 it could not run (invalid bundle, ira unreachable or refusing, the
replay failed). The last line printed is always a one-line verdict.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import httpx

from ira.infra.bundle import BundleDocument, BundleError, BundleExistsError, load_bundle, write_bundle
from ira.replay.models import Observations, ReplayRequest, ReplayView

Say = Callable[[str], None]
POLL = 0.5
"""Seconds between two looks at the replay (a person watching, not a synchronisation)."""


@dataclass(frozen=True)
class ReplayOptions:
    url: str
    token: str
    speed: float = 0.0
    observations: Observations = "recorded"
    timeout: float = 900.0

    def client(self) -> httpx.AsyncClient:
        return httpx.AsyncClient(base_url=self.url, timeout=30, headers={"authorization": f"Bearer {self.token}"})


def request_of(document: BundleDocument, options: ReplayOptions) -> ReplayRequest:
    return ReplayRequest(**dict(document), speed=options.speed, observations_from=options.observations)


async def replay_bundle(directory: Path, options: ReplayOptions, *, say: Say) -> int:
    """``ira replay --bundle DIR``."""
    try:
        document = load_bundle(directory).document
    except BundleError as exc:
        for problem in exc.problems:
            say(f"{directory}/{problem}")
        say(f"ERROR: {directory} is not a valid bundle ({len(exc.problems)} problem(s)); nothing replayed")
        return 2
    async with options.client() as api:
        return await _replay(api, request_of(document, options), say=say, timeout=options.timeout)


async def replay_run(run_id: str, options: ReplayOptions, *, say: Say) -> int:
    """``ira replay --run RUN_ID``: the run recorded by the same ira, then replayed like a bundle."""
    async with options.client() as api:
        try:
            document = await fetch_bundle(api, run_id)
        except (httpx.HTTPError, ReplayRefusedError) as exc:
            say(f"ERROR: run {run_id} could not be recorded: {exc}")
            return 2
        say(f"recorded  run {run_id}: {len(document.events)} events, {len(document.observations)} observations, "
            f"{len(document.model_calls)} model calls")
        return await _replay(api, request_of(document, options), say=say, timeout=options.timeout)


async def _replay(api: httpx.AsyncClient, body: ReplayRequest, *, say: Say, timeout: float) -> int:
    try:
        view = await _start(api, body)
        say(f"replay    {view.replay_id}: {body.manifest.bundle_id} into staging of {api.base_url} "
            f"(observations {body.observations_from})")
        view = await _follow(api, view, say=say, timeout=timeout)
    except (httpx.HTTPError, ReplayRefusedError) as exc:
        say(f"ERROR: the replay could not run: {exc}")
        return 2
    return show(view, say)


class ReplayRefusedError(Exception):
    pass


async def record_run(run_id: str, out: Path, *, url: str, token: str, say: Say) -> int:
    """0: written and valid; 2: the run could not be recorded (unknown, still running, ira unreachable)."""
    async with ReplayOptions(url=url, token=token).client() as api:
        try:
            document = await fetch_bundle(api, run_id)
            write_bundle(document, out)
            bundle = load_bundle(out)
        except (httpx.HTTPError, ReplayRefusedError, BundleExistsError, BundleError) as exc:
            say(f"ERROR: run {run_id} was not recorded: {exc}")
            return 2
    say(f"recorded  run {run_id} -> {out}: {len(bundle.events)} events, {len(bundle.observations)} observations, "
        f"{len(bundle.model_calls)} model calls, {len(bundle.runbooks)} runbooks, "
        f"outcome {bundle.outcome.run_state if bundle.outcome else '-'}")
    return 0


async def fetch_bundle(api: httpx.AsyncClient, run_id: str) -> BundleDocument:
    response = await api.get(f"/v1/runs/{run_id}/bundle")
    if response.status_code != 200:
        raise ReplayRefusedError(f"GET /v1/runs/{run_id}/bundle answered {response.status_code}: "
                                 f"{response.text[:500]}")
    return BundleDocument.model_validate_json(response.content)


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
