"""The ira side of bench/engine.py: the coordinator, instant investigators, the relay and the
scanner on the embedded broker (bench/runs.py's stack), plus a chain of no-op steps.

A run starts when its ``create_run`` decision is published (how ira starts runs) and reaches
its wait when APPROVAL_REQUESTED is committed; approve -> completed runs the ticket Operation,
verification and the notification step.
"""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import AsyncIterator, Iterable, Sequence
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import asyncpg
import runs as incident_runs
from sqlalchemy import bindparam, func, select
from sqlalchemy.ext.asyncio import AsyncConnection

from ira.coordinator.deps import Deps
from ira.coordinator.notify import APPROVAL_REQUESTED, RUN_COMPLETED
from ira.core.clock import SystemClock
from ira.core.commit import NewRun, NewStep, OutboxMessage
from ira.core.delivery import DELIVERY_REQUESTED
from ira.core.envelope import Envelope
from ira.core.ids import new_id
from ira.core.states import StepState
from ira.runtime.bus.producer import BusProducer
from ira.runtime.dispatch import StepContext, StepDispatcher
from ira.runtime.intake import StepIntake
from ira.runtime.store import runs as run_store
from ira.runtime.store.database import Database
from ira.runtime.store.schema import runs
from ira.runtime.wakeup import step_wakeup

CHAIN = "bench-chain"
_COUNT = select(func.count()).select_from(runs).where(runs.c.state == bindparam("state"))
TENANT = "bench"


@dataclass
class Chains:
    """Runs of N no-op steps in a row, each step finishing with a fenced commit that makes the next
    one READY (and writes its wake-up) in the same transaction."""

    db: Database
    clock: SystemClock = field(default_factory=SystemClock)
    ended: dict[str, asyncio.Future[float]] = field(default_factory=dict)

    async def step(self, ctx: StepContext) -> None:
        """Decides on nothing of the run: its fenced commit applies on the run as the fence takes
        its row (``incident_runs.finish``), as ira's investigators commit their results."""
        async with self.db.transaction() as conn:
            await incident_runs.finish(conn, ctx, at=self.clock.now())
        if ctx.step.binding.get("last"):
            self.ended[ctx.claim.run_id].set_result(time.perf_counter())

    async def run_ms(self, length: int) -> float:
        """Create one chain run (its first step READY, woken through the outbox) and wait for its end."""
        run_id, now = new_id("run"), self.clock.now()
        names = [f"c{i:03d}" for i in range(length)]
        plan = tuple(NewStep(step_id=name, kind=CHAIN, state=StepState.READY if i == 0 else StepState.BLOCKED,
                             depends_on=(names[i - 1],) if i else (), binding={"last": i == length - 1})
                     for i, name in enumerate(names))
        self.ended[run_id] = asyncio.get_running_loop().create_future()
        started = time.perf_counter()
        async with self.db.transaction() as conn:
            await run_store.create_run(conn, NewRun(
                tenant_id=TENANT, run_id=run_id, task_id=new_id("task"), task_kind="chain", subject_ref="chain",
                workflow="chain@1", steps=plan,
                outbox=(step_wakeup(TENANT, run_id, names[0], kind=CHAIN, environment=incident_runs.ENV, at=now),)),
                at=now)
        try:
            ended = await asyncio.wait_for(self.ended[run_id], timeout=120)
        finally:
            del self.ended[run_id]
        return (ended - started) * 1000


@dataclass
class Heard:
    """Hears the commits that request a ``kind`` notification (APPROVAL_REQUESTED commits with
    the run's wait, RUN_COMPLETED with its end): a wait for runs to get there wakes when one
    commits, instead of polling the database on the loop the engine runs on (each poll a reader
    connection and a statement; counting every run in a state made each poll, and the server's
    CPU the bench measures, grow with the runs already done). A commit listener of the bench,
    not of ira: it takes nothing."""

    kind: str
    count: int = 0
    changed: asyncio.Event = field(default_factory=asyncio.Event)

    def take(self, message: OutboxMessage) -> str | None:
        return None

    async def taken(self, conn: AsyncConnection, message: OutboxMessage) -> None:
        raise AssertionError("Heard takes nothing")

    def committed(self, messages: Sequence[OutboxMessage]) -> None:
        heard = sum(1 for m in messages if m.envelope.type == DELIVERY_REQUESTED
                    and m.envelope.payload.get("kind") == self.kind)
        if heard:
            self.count += heard
            self.changed.set()

    def abandoned(self, messages: Sequence[OutboxMessage]) -> None:
        pass

    async def until(self, count: int, *, timeout: float) -> None:
        """Until ``count`` of them committed since the start, or ``timeout``."""
        deadline = time.monotonic() + timeout
        while self.count < count and (left := deadline - time.monotonic()) > 0:
            self.changed.clear()
            with suppress(TimeoutError):
                await asyncio.wait_for(self.changed.wait(), timeout=min(left, 1.0))


@dataclass
class IraEngine:
    db: Database
    deps: Deps
    producer: BusProducer
    chains: Chains
    asked: Heard = field(default_factory=lambda: Heard(APPROVAL_REQUESTED))
    completed: Heard = field(default_factory=lambda: Heard(RUN_COMPLETED))
    hops: list[float] = field(default_factory=list)
    """ms from each decision published by ``one_run_ms`` to its run's creation: the run
    request's way to the coordinator, mostly the embedded broker's hop (a record waits for the
    end of the fetch in flight, up to ``runs.DECISION_FETCH_WAIT``); LangGraph has none."""

    async def chain_ms(self, length: int) -> float:
        return await self.chains.run_ms(length)

    async def one_run_ms(self) -> float:
        """One run, decision published -> APPROVAL_REQUESTED committed, in ms (its hop: ``hops``)."""
        return next(iter((await self.to_waiting(incident_runs.decisions(1, TENANT), self.hops)).values()))

    async def burst(self, count: int) -> tuple[list[float], float]:
        """``count`` decisions published at once: (ms each to its approval wait, wall seconds)."""
        started = time.perf_counter()
        took = await self.to_waiting(incident_runs.decisions(count, TENANT))
        return list(took.values()), time.perf_counter() - started

    async def to_waiting(self, envelopes: list[Envelope], hops: list[float] | None = None) -> dict[str, float]:
        """Publish ``create_run`` decisions; incident_id -> ms from publish to APPROVAL_REQUESTED
        (only the runs that got there within the timeout); each one's ms from publish to its
        run's creation appended to ``hops`` if given."""
        asked = self.asked.count + len(envelopes)
        sent = await incident_runs.publish(self.producer, envelopes)
        await self.asked.until(asked, timeout=60 + len(envelopes))
        at = await incident_runs.created_and_asked(self.db, list(sent), TENANT)  # the database's word, these runs only
        if len(at) < len(sent):
            print(f"only {len(at)} of {len(sent)} runs asked for approval in time", file=sys.stderr, flush=True)
        if hops is not None:
            hops.extend((at[i][0] - t) * 1000 for i, t in sent.items() if i in at)
        return {i: (at[i][1] - t) * 1000 for i, t in sent.items() if i in at}

    async def approve_all(self) -> tuple[int, float]:
        """Approve every pending approval at once; (runs, seconds until all completed)."""
        waiting = await self._count("waiting")
        completed = self.completed.count + waiting
        started = time.perf_counter()
        await incident_runs.approve_all(self.deps)
        await self.completed.until(completed, timeout=60 + waiting)
        done = waiting - max(0, completed - self.completed.count)
        if done < waiting:
            print(f"only {done} of {waiting} runs completed in time", file=sys.stderr, flush=True)
        return done, time.perf_counter() - started

    async def _count(self, state: str) -> int:
        """Counted by the database, once per measure (not polled: see ``Heard``)."""
        async with self.db.reader() as conn:
            return int((await conn.execute(_COUNT, {"state": state})).scalar_one())


async def analyze(url: str) -> None:
    """``ANALYZE`` the PostgreSQL database at ``url`` (every schema in it: both systems' tables)."""
    admin = await asyncpg.connect(url)
    try:
        await admin.execute("ANALYZE")
    finally:
        await admin.close()


class Settles(Protocol):
    async def burst(self, count: int) -> tuple[list[float], float]: ...
    async def approve_all(self) -> tuple[int, float]: ...


async def settled(engines: Iterable[Settles], backend: str, url: str | None, runs: int) -> None:
    """PostgreSQL: each engine takes ``runs`` runs to the end, then ``ANALYZE``: measured as a
    database that has held runs is planned, not as a fresh schema without statistics is
    (bench/engine.py's ``settle``). Nothing on SQLite or with ``runs`` 0."""
    if backend != "postgresql" or not runs or url is None:
        return
    for engine in engines:
        await engine.burst(runs)
        await engine.approve_all()
    await analyze(url)


@asynccontextmanager
async def ira_engine(backend: str, url: str | None, workdir: Path, bootstrap: str) -> AsyncIterator[IraEngine]:
    """A fresh database and the whole stack on ``bootstrap``, warmed up (groups joined)."""
    async with incident_runs.database(backend, url, workdir) as db, \
            incident_runs.stack(db, bootstrap) as (deps, producer):
        chains = Chains(db)
        intake = StepIntake(StepDispatcher(db=db, clock=chains.clock, handlers={CHAIN: chains.step},
                                           owner="bench-chain"), 64)
        async with incident_runs.eager_steps(db, intake, incident_runs.step_consumer("bench-chain", intake, bootstrap,
                                                                                     producer)):
            engine = IraEngine(db=db, deps=deps, producer=producer, chains=chains)
            with db.listening(engine.asked), db.listening(engine.completed):
                await engine.to_waiting(incident_runs.decisions(1, TENANT))  # warm-up: every group has joined
                await chains.run_ms(2)
                yield engine
