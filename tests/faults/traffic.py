"""What the harness sends: bursts of alerts as Alertmanager would (retrying until a 202), the
bundled incident's alert that starts a run, and a person approving its ticket draft."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import httpx

from ira.infra.demo import DEMO_BUNDLE

AM = {"authorization": "Bearer dev-am-token"}
ADMIN = {"authorization": "Bearer dev-admin-token"}
ALERTS_PER_REQUEST = 10


def burst_payload(case: str, batch: int, size: int = ALERTS_PER_REQUEST) -> dict[str, Any]:
    """``size`` distinct alerts below the run threshold (stored, never a run)."""
    alerts = [{"status": "firing", "labels": {"alertname": "FaultBurst", "service": "burst", "severity": "info",
                                               "instance": f"{case}-{batch}-{i}"},
               "annotations": {"summary": "fault matrix burst"}, "startsAt": "2026-11-29T11:00:00Z"}
              for i in range(size)]
    return {"receiver": "ira", "status": "firing", "alerts": alerts, "version": "4"}


def incident_payload() -> dict[str, Any]:
    """The bundled incident's alert (critical: it starts the run the recording answers)."""
    events = json.loads((DEMO_BUNDLE / "events.json").read_text())
    return next(e["payload"] for e in events if e["kind"] == "alertmanager")


@dataclass
class Sender:
    """Posts like Alertmanager: a request not answered 202 is sent again until ``deadline``."""

    urls: Callable[[], Sequence[str]]
    """Gateways to try, in turn (more than one when several processes serve the webhook)."""
    accepted: set[str] = field(default_factory=set)
    """Every event id of every request answered 202 (duplicates included: ids are deterministic)."""
    answers: dict[int, int] = field(default_factory=dict)
    """Answers by HTTP status (0: no answer)."""

    async def post(self, payload: dict[str, Any], *, deadline: float) -> bool:
        """One request until it got a 202 (True) or the deadline passed (False)."""
        async with httpx.AsyncClient(timeout=10) as client:
            for attempt in range(10_000):
                url = self.urls()[attempt % len(self.urls())]
                status = await self._try(client, url, payload)
                if status == 202:
                    return True
                if time.monotonic() > deadline:
                    return False
                await asyncio.sleep(min(0.05 * 2 ** min(attempt, 5), 1.0))
        return False

    async def _try(self, client: httpx.AsyncClient, url: str, payload: dict[str, Any]) -> int:
        try:
            answer = await client.post(f"{url}/v1/sources/alertmanager/am", json=payload, headers=AM)
        except httpx.HTTPError:
            status = 0
        else:
            status = answer.status_code
            if status == 202:
                self.accepted.update(answer.json()["event_ids"])
        self.answers[status] = self.answers.get(status, 0) + 1
        return status

    async def burst(self, case: str, requests: int, *, size: int, concurrency: int, deadline: float,
                    on_progress: Callable[[int], None] = lambda _n: None) -> None:
        """``requests`` requests of ``size`` alerts, ``concurrency`` at a time; ``on_progress(done)``
        after each."""
        queue = iter(range(requests))
        done = 0

        async def lane() -> None:
            nonlocal done
            for batch in queue:
                await self.post(burst_payload(case, batch, size), deadline=deadline)
                done += 1
                on_progress(done)

        await asyncio.gather(*(lane() for _ in range(concurrency)))


async def approve_when_asked(url: Callable[[], str], *, deadline: float) -> str | None:
    """Approve the first pending approval of a waiting run; the run id, or None by the deadline."""
    async with httpx.AsyncClient(headers=ADMIN, timeout=5) as client:
        while time.monotonic() < deadline:
            try:
                run_id = await _approve_one(client, url())
            except (httpx.HTTPError, KeyError, ValueError):
                run_id = None
            if run_id is not None:
                return run_id
            await asyncio.sleep(0.5)
    return None


async def _approve_one(client: httpx.AsyncClient, base: str) -> str | None:
    runs = (await client.get(f"{base}/v1/runs", params={"state": "waiting"})).json()["runs"]
    for run in runs:
        if run.get("wait_kind") != "approval":
            continue
        detail = (await client.get(f"{base}/v1/runs/{run['run_id']}")).json()
        for approval in detail["approvals"]:
            if approval["state"] == "pending":
                decided = await client.post(f"{base}/v1/approvals/{approval['approval_id']}/decision",
                                            json={"decision": "approve", "reason": "fault matrix"})
                if decided.status_code in (200, 409):
                    return str(run["run_id"])
    return None
