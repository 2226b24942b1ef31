"""The replay loop: send each replay's due events, find the run they started, report once it settles.

Every step is bounded: at most ``max_active`` replays are looked at per tick, an event is sent
at most once per tick, and a replay whose run has not settled within ``timeout`` fails with
that reason. Progress is stored after each event, so a restarted process resumes where it was.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import httpx

from ira.core.clock import Clock
from ira.core.replay import Expectations, Outcome, Volatile, compare, unmet_expectations
from ira.core.states import RunState
from ira.infra.bundle.format import SourceEvent
from ira.readmodel.replay import replay_run, run_outcome
from ira.replay import store
from ira.replay.models import ReplayReport
from ira.replay.send import ReplaySendError, send_event, staging_payload
from ira.runtime.settings import Settings
from ira.runtime.store.database import Database

SETTLED = frozenset({RunState.WAITING, RunState.COMPLETED, RunState.FAILED, RunState.CANCELLED})
"""A replay's run has nothing more to show once it waits (for an approval) or has ended."""


@dataclass(frozen=True)
class ReplayConfig:
    max_active: int = 2
    """Replays sending or running at once; more are refused (429), so staging never starves production."""
    timeout: timedelta = timedelta(minutes=10)
    interval: timedelta = timedelta(milliseconds=200)
    """How often the loop comes round while a replay is sending or running."""
    idle_interval: timedelta = timedelta(seconds=2)
    """How often it looks while none is: a replay requested through this process's API wakes it
    at once; one requested through another process's is picked up within this."""


@dataclass
class ReplayLoop:
    db: Database
    clock: Clock
    settings: Settings
    client: httpx.AsyncClient
    """Points at this ira's own gateway: events take the normal ingest path."""
    config: ReplayConfig = ReplayConfig()

    async def tick(self) -> bool:
        """One round over the active replays; whether there was one (else the loop may rest)."""
        async with self.db.reader() as conn:
            rows = await store.active(conn, limit=self.config.max_active)
        for row in rows:
            if row.state == store.SENDING:
                await self._send_due(row)
            else:
                await self._watch(row)
        return bool(rows)

    async def _send_due(self, row: Any) -> None:
        now = self.clock.now()
        events = [SourceEvent.model_validate(e) for e in row.original["events"]]
        speed, first = float(row.original.get("speed") or 0), events[0].offset_seconds
        shift = row.created_at - datetime.fromisoformat(row.original["window_end"])
        recording = None if row.original.get("observations_from") == "live" else row.recording_ref
        for index in range(row.events_sent, len(events)):
            event = events[index]
            if speed > 0 and (event.offset_seconds - first) / speed > (now - row.created_at).total_seconds():
                return
            payload = staging_payload(event, shift=shift, replay_id=row.replay_id, recording_ref=recording)
            try:
                await send_event(self.client, self.settings, event, tenant_id=row.tenant_id, payload=payload)
            except ReplaySendError as exc:
                if not exc.retryable or self._timed_out(row, now):
                    await self._update(row, state=store.FAILED, error=str(exc)[:1000])
                return
            await self._update(row, events_sent=index + 1)
        await self._update(row, state=store.RUNNING)

    async def _watch(self, row: Any) -> None:
        now = self.clock.now()
        async with self.db.reader() as conn:
            run = await replay_run(conn, row.tenant_id, row.replay_id, since=row.created_at)
            if run is not None and run.state in SETTLED:
                report = self._report(row, await run_outcome(conn, row.tenant_id, run.run_id))
        if run is None or run.state not in SETTLED:
            if run is not None and row.run_id is None:
                await self._update(row, run_id=run.run_id)
            if self._timed_out(row, now):
                await self._update(row, state=store.FAILED,
                                   error=f"the run did not settle within {self.config.timeout}")
            return
        await self._update(row, state=store.FINISHED, run_id=run.run_id, report=report.model_dump(mode="json"))

    def _report(self, row: Any, outcome: Outcome) -> ReplayReport:
        original = Outcome.model_validate(row.original.get("outcome") or {})
        raw = row.original.get("expectations")
        expectations = Expectations.model_validate(raw) if raw else None
        comparison = compare(original, outcome, volatile=Volatile(environment=row.original.get("environment")))
        unmet = tuple(unmet_expectations(expectations, outcome)) if expectations else ()
        passed = not unmet
        judged = ("expectations met" if passed else f"{len(unmet)} expectation(s) unmet") if expectations \
            else "no expectations"
        verdict = (f"{'PASS' if passed else 'FAIL'}: replay {row.replay_id} of {row.bundle_id} ended "
                   f"{outcome.run_state}; {len(comparison.differences)} difference(s) from the original; {judged}")
        return ReplayReport(outcome=outcome, comparison=comparison, unmet=unmet, passed=passed, verdict=verdict)

    def _timed_out(self, row: Any, now: datetime) -> bool:
        return now - row.created_at > self.config.timeout

    async def _update(self, row: Any, **values: Any) -> None:
        async with self.db.transaction() as conn:
            await store.progress(conn, row, at=self.clock.now(), **values)
