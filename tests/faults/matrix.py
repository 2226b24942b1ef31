"""The fault matrix: each case hurts a real cluster at one boundary, then checks the invariants.

A case is a fault point armed in the main ``ira dev`` process (it SIGKILLs itself there, once)
or a harness action fired a third of the way through a burst of alerts; the cluster restarts
whatever died, the harness keeps sending (as Alertmanager retries) and approving, and once the
work has settled (or a deadline passed) :mod:`tests.faults.invariants` reads the store.
``make faults`` runs every case five times; ``make test`` runs the smoke cases once
(``tests/faults/test_matrix.py``).
"""

from __future__ import annotations

import asyncio
import signal
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from tests.faults import invariants
from tests.faults.cluster import INGEST_LANDED, Cluster, IraProcess, case_config, cluster
from tests.faults.invariants import Verdict
from tests.faults.traffic import Sender, approve_when_asked, incident_payload

READY_WITHIN = 120.0
SETTLE_WITHIN = 150.0


@dataclass(frozen=True)
class Case:
    name: str
    what: str
    """The boundary or the action, as the table prints it."""
    fault: str = ""
    """A fault point armed in the main process for its first life."""
    action: str = ""
    """A harness action fired a third into the burst (see ``ACTIONS``)."""
    requests: int = 6
    """Burst requests of ``size`` alerts each."""
    size: int = 10
    incident: bool = True
    """Also send the bundled incident's alert and approve its ticket draft."""
    second_coordinator: bool = False
    embedded_broker: bool = False
    """``ira dev`` runs its own broker: what it holds is gone when the process is."""
    smoke: bool = False


CASES: tuple[Case, ...] = (
    Case("ticket-after-intent", "SIGKILL after the Operation's intent (with its SUBMITTED permit, one commit)",
         fault="ticket.after_intent"),
    Case("ticket-after-submit", "SIGKILL after SUBMITTED, before the send", fault="ticket.after_submit", smoke=True),
    Case("ticket-after-create", "SIGKILL after the ticket was created, before its receipt",
         fault="ticket.after_create"),
    Case("ticket-after-receipt", "SIGKILL after the receipt (with the step's DONE, one commit), before the next move",
         fault="ticket.after_receipt"),
    Case("ticket-after-finish", "SIGKILL after the step finished", fault="ticket.after_finish"),
    Case("run-start-claimed", "SIGKILL after a run's start committed its branches claimed (RUNNING, leased), "
         "before they run", fault="intake.after_claimed_insert"),
    Case("after-c6", "SIGKILL after C6 (run completed), before delivery", fault="run.after_complete"),
    Case("mid-delivery", "SIGKILL after the channel answered, before the receipt", fault="delivery.after_send"),
    Case("relay-after-publish", "SIGKILL after publish, before mark", fault="relay.after_publish"),
    Case("sigterm-burst", "SIGTERM during a burst of 2,000 alerts", action="sigterm", requests=40, size=50,
         incident=False),
    Case("sigterm-burst-embedded-broker", "SIGTERM during a burst of 2,000 alerts, `ira dev`'s own broker",
         action="sigterm", requests=40, size=50, incident=False, embedded_broker=True, smoke=True),
    Case("sigkill-burst", "SIGKILL of the process group during a burst of 2,000 alerts", action="sigkill",
         requests=40, size=50, incident=False),
    Case("redis-killed", "Redis killed and restarted empty during a burst", action="kill_redis", requests=30,
         incident=False),
    Case("db-connections-cut", "PostgreSQL connections terminated during a burst", action="cut_db", requests=30),
    Case("two-coordinators-one-killed", "two coordinators, one SIGKILLed mid-run", action="kill_coordinator",
         second_coordinator=True, smoke=True),
    *((
        Case("broker-killed", "broker killed and restarted empty during a burst", action="kill_broker", requests=30),
        Case("ingest-after-commit", "SIGKILL after the ingest commit, before the 202", fault="ingest.after_commit",
             incident=False),
        Case("triage-after-apply", "SIGKILL after triage's commit, before its offset commit",
             fault="consumer.triage.after_apply", incident=False),
    ) if INGEST_LANDED else ()),
)


@dataclass
class CaseResult:
    case: Case
    verdict: Verdict
    accepted: int
    fired: bool
    """The fault point was reached (or the action ran)."""
    restarts: int
    seconds: float
    notes: list[str] = field(default_factory=list)

    @property
    def held(self) -> bool:
        return self.fired and self.verdict.held


async def run_case(case: Case, tmp: Path) -> CaseResult:
    started = time.monotonic()
    async with cluster(tmp) as built:
        config = case_config(tmp)
        main = built.add("dev", "dev", faults=case.fault, config=config, own_broker=case.embedded_broker)
        extra = built.add("coordinator", "worker", "--role", "coordinator", config=config) \
            if case.second_coordinator else None
        await built.start()
        await _ready(main)
        sender = Sender(urls=lambda: [main.url])
        fired = await _drive(case, built, main, extra, sender)
        verdict, notes = await _settle(built.database_url, sender, case)
        notes += built.notes
        return CaseResult(case, verdict, len(sender.accepted), fired, sum(len(p.exits) for p in built.processes),
                          time.monotonic() - started, notes)


async def _drive(case: Case, built: Cluster, main: IraProcess, extra: IraProcess | None, sender: Sender) -> bool:
    """Send the incident and the burst, fire the action a third in, approve the draft."""
    deadline = time.monotonic() + SETTLE_WITHIN
    fired = asyncio.Event()
    action = ACTIONS.get(case.action)
    trigger = max(1, case.requests // 3)
    background: set[asyncio.Task[object]] = set()

    def on_progress(done: int) -> None:
        if action is not None and done == trigger and not fired.is_set():
            fired.set()
            background.add(asyncio.create_task(action(built, main, extra)))

    work = [sender.burst(case.name, case.requests, size=case.size, concurrency=8, deadline=deadline,
                         on_progress=on_progress)]
    if case.incident:
        work += [sender.post(incident_payload(), deadline=deadline),
                 approve_when_asked(lambda: main.url, deadline=deadline)]
    await asyncio.gather(*work)
    await asyncio.gather(*background)
    if case.fault:
        await _wait(lambda: bool(main.exits), within=60)  # a point reached late (delivery) still counts
        return bool(main.exits)
    return fired.is_set()


async def _settle(database_url: str, sender: Sender, case: Case) -> tuple[Verdict, list[str]]:
    """Wait until every accepted alert is stored, every run terminal and every delivery tried."""
    deadline = time.monotonic() + SETTLE_WITHIN
    notes: list[str] = []
    while time.monotonic() < deadline:
        missing, states, pending = await invariants.progress(database_url, sender.accepted)
        runs_done = all(s in invariants.TERMINAL for s in states) and (bool(states) or not case.incident)
        if missing == 0 and runs_done and pending == 0:
            break
        await asyncio.sleep(1)
    else:
        notes.append(f"not settled after {SETTLE_WITHIN:.0f}s: {missing} alerts missing, runs {states}, "
                     f"{pending} deliveries pending")
    return await invariants.check(database_url, sender.accepted), notes


async def _ready(process: IraProcess) -> None:
    async def ready() -> bool:
        try:
            async with httpx.AsyncClient(timeout=3) as client:
                return (await client.get(f"{process.url}/readyz")).status_code == 200
        except httpx.HTTPError:
            return False

    if not await _wait(ready, within=READY_WITHIN):
        raise RuntimeError(f"{process.name} not ready within {READY_WITHIN:.0f}s:\n{process.log_tail()}")


async def _wait(check: Callable[[], bool | Awaitable[bool]], *, within: float) -> bool:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        result = check()
        if result if isinstance(result, bool) else await result:
            return True
        await asyncio.sleep(0.25)
    return False


Action = Callable[[Cluster, IraProcess, IraProcess | None], Awaitable[None]]


async def _sigkill(built: Cluster, main: IraProcess, extra: IraProcess | None) -> None:
    main.signal_group(signal.SIGKILL)


async def _sigterm(built: Cluster, main: IraProcess, extra: IraProcess | None) -> None:
    main.signal_group(signal.SIGTERM)


async def _kill_broker(built: Cluster, main: IraProcess, extra: IraProcess | None) -> None:
    await built.kill_broker()


async def _kill_redis(built: Cluster, main: IraProcess, extra: IraProcess | None) -> None:
    await built.kill_redis()


async def _cut_db(built: Cluster, main: IraProcess, extra: IraProcess | None) -> None:
    await built.cut_database()


async def _kill_coordinator(built: Cluster, main: IraProcess, extra: IraProcess | None) -> None:
    """SIGKILL the second coordinator while it holds a step of the run (or after 60 s anyway)."""
    assert extra is not None and extra.proc is not None
    owner = f":{extra.proc.pid}"
    if not await _wait(lambda: invariants.holds_a_step(built.database_url, owner), within=60):
        built.notes.append("the second coordinator never held a step; killed anyway")
    extra.signal_group(signal.SIGKILL)


ACTIONS: dict[str, Action] = {
    "sigkill": _sigkill, "sigterm": _sigterm, "kill_broker": _kill_broker, "kill_redis": _kill_redis,
    "cut_db": _cut_db, "kill_coordinator": _kill_coordinator,
}


def table(results: list[CaseResult]) -> str:
    """The matrix as a markdown table, one row per case (its repetitions folded)."""
    lines = ["| case | boundary / action | tries | alerts accepted | restarts | result |", "|---|---|---|---|---|---|"]
    by_case: dict[str, list[CaseResult]] = {}
    for result in results:
        by_case.setdefault(result.case.name, []).append(result)
    for name, runs in by_case.items():
        accepted = sorted(r.accepted for r in runs)
        restarts = sorted(r.restarts for r in runs)
        lines.append(f"| {name} | {runs[0].case.what} | {len(runs)} | {_span(accepted)} | {_span(restarts)} | "
                     f"{_outcome(runs)} |")
    return "\n".join(lines)


def _span(values: list[int]) -> str:
    return f"{values[0]:,}" if values[0] == values[-1] else f"{values[0]:,}–{values[-1]:,}"


def _outcome(runs: list[CaseResult]) -> str:
    if all(r.held for r in runs):
        return "**held**: 0 lost, 0 duplicated, 0 duplicate tickets, runs settled, run_seq contiguous, " \
               "budget ≥ 0, every delivery attempted"
    failed: dict[str, list[int]] = {}
    for run in runs:
        for name, count in run.verdict.counts.items():
            if count:
                failed.setdefault(name, []).append(count)
    parts = [f"{name} {_span(sorted(counts))} in {len(counts)}/{len(runs)}" for name, counts in failed.items()]
    if not all(r.fired for r in runs):
        parts.append(f"fault not reached in {sum(not r.fired for r in runs)}/{len(runs)}")
    return "**FAILED**: " + "; ".join(parts)


def summary(result: CaseResult) -> str:
    """One line per run, for the log of ``make faults``."""
    state = "held" if result.held else f"FAILED {result.verdict.counts} {result.verdict.examples}"
    notes = f" ({'; '.join(result.notes)})" if result.notes else ""
    return f"{result.case.name}: {state}; accepted {result.accepted}, restarts {result.restarts}, " \
           f"{result.seconds:.0f}s{notes}"


async def run_matrix(cases: tuple[Case, ...], repetitions: int, tmp: Path,
                     say: Callable[[str], None] = print) -> list[CaseResult]:
    results = []
    for case in cases:
        for rep in range(repetitions):
            result = await run_case(case, tmp / f"{case.name}-{rep}")
            say(summary(result))
            results.append(result)
    return results

