"""Benchmark: incident runs through the coordinator on the embedded broker (JSON lines).

Usage: python bench/runs.py [--ops N] [--probe P] [--database-url postgresql://...]

* ``latency``  decision published -> APPROVAL_REQUESTED committed, instant investigators:
  P decisions one at a time (``idle``), then a burst of N at once (``burst``); p50/p99 ms.
* ``memory``   this process's RSS (coordinator + agents + relay) and asyncio tasks after the
  P probe runs, then with P+N runs waiting: a waiting run holds no worker.
* ``throughput`` all waiting runs approved at once: completed runs per minute.
* ``step_overhead`` claim -> commit -> release per step kind (bench/steps.py: a no-op step).
References: Temporal self-hosted ~5 ms/workflow; LangGraph ~0.2 ms/step without checkpoints.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path

from scratch import scratch_database
from sqlalchemy import bindparam, select
from sqlalchemy.ext.asyncio import AsyncConnection

from ira.connectors.tickets.builtin import BuiltinTicketSystem
from ira.coordinator import records
from ira.coordinator.approval import Choice
from ira.coordinator.config import WorkflowConfig
from ira.coordinator.decisions import record_decision
from ira.coordinator.deps import Deps
from ira.coordinator.handlers import step_handlers
from ira.coordinator.worker import CoordinatorWorker
from ira.core.alert import AlertEvent, AlertStatus, DecisionKind, Severity, SourceKind
from ira.core.clock import Clock, SystemClock
from ira.core.commit import Fence, OutboxMessage, RunCommit, StepChange
from ira.core.decision import DECISION_MESSAGE, IncidentDecision
from ira.core.envelope import Envelope, Topic, topic_name
from ira.core.errors import BrokerUnavailableError
from ira.core.ids import new_event_id, new_id
from ira.core.investigation import BranchKind, BranchResult, Evidence, StopReason
from ira.core.states import StepState
from ira.infra.tansu import EmbeddedKafka
from ira.runtime.bus.admin import ensure_topics
from ira.runtime.bus.consumer import ConsumerRunner, ConsumerSettings
from ira.runtime.bus.producer import BusProducer
from ira.runtime.dispatch import StepContext, StepDispatcher, StepHandler
from ira.runtime.intake import StepIntake
from ira.runtime.relay import OutboxRelay
from ira.runtime.scanner import Scanner
from ira.runtime.store import budget
from ira.runtime.store import runs as run_store
from ira.runtime.store.artifacts import put_artifact
from ira.runtime.store.database import Database
from ira.runtime.store.schema import attempts, events, runs

ENV = "prod"
FAST = ConsumerSettings(session_timeout=timedelta(seconds=2), fetch_wait=timedelta(milliseconds=50))
DECISION_FETCH_WAIT = timedelta(milliseconds=10)
"""The coordinator's run requests consumer: the embedded broker answers a fetch when its wait
ends, so each run's first hop (the decision's publish -> the coordinator) is up to ~half of
this (measured p50 ~11 ms at 50 ms, ~4.5 ms at 10 ms; an idle poll every 10 ms costs ~3.5 % of
a core here and as much in the broker)."""


def progress(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def percentile(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def decisions(count: int, tenant: str = "bench") -> list[Envelope]:
    now = datetime.now(UTC)
    out = []
    for _ in range(count):
        alert = AlertEvent(event_id=new_event_id(), tenant_id=tenant, source_id="am",
                           source_kind=SourceKind.ALERTMANAGER, source_event_id=new_id("src"), fingerprint="fp",
                           status=AlertStatus.FIRING, name="OrderLatencyHigh", severity=Severity.CRITICAL,
                           starts_at=now - timedelta(minutes=5), received_at=now, service="order-service")
        d = IncidentDecision(evaluation_id=new_id("evl"), decision=DecisionKind.CREATE_RUN, tenant_id=tenant,
                             incident_id=new_id("inc"), incident_version=1, group_key="order-service",
                             service="order-service", environment="prod", severity="critical",
                             title="order-service p99 latency", alert=alert, opened_at=now, reason="new incident")
        out.append(Envelope(message_id=new_event_id(), type=DECISION_MESSAGE, tenant_id=tenant, occurred_at=now,
                            payload=d.model_dump(mode="json")))
    return out


async def finish(conn: AsyncConnection, ctx: StepContext, *, at: datetime, ref: str | None = None) -> None:
    """The step DONE with a fenced commit on the run as its fence takes the run's row: the step
    decides on nothing of the run (``RunCommit.expected_version`` None), so it neither reads the
    run first nor loses to a writer that moved it meanwhile."""
    c = ctx.claim
    await run_store.commit(conn, RunCommit(
        tenant_id=c.tenant_id, run_id=c.run_id, expected_version=None,
        fence=Fence(step_id=c.step_id, owner_epoch=c.owner_epoch),
        steps=(StepChange(step_id=c.step_id, state=StepState.DONE, result_ref=ref),)), at=at)


def instant_investigators(db: Database, clock: Clock) -> dict[str, StepHandler]:
    """Branches that answer at once: one canned evidence, step DONE (fenced), slice closed.

    As ira's own investigators (``agents/handler.py``): the slice is closed by the fenced commit
    (``budget.close_slice_with_commit``; on PostgreSQL in its compare-and-set), after it took the
    run's row, as the coordinator's steps take the root's budget rows. Closing the slice first,
    on its own, made three branches of one run deadlock on PostgreSQL with a commit that held
    the run and charged the root (each found after ``deadlock_timeout``, 1 s)."""

    async def handle(ctx: StepContext) -> None:
        c, now, tools = ctx.claim, clock.now(), ctx.step.binding["tools"]
        result = BranchResult(branch=BranchKind(ctx.step.kind), stop_reason=StopReason.DONE, evidence=(
            Evidence(evidence_id="e1", source=tools[0], summary="p99 latency tripled after deploy"),))
        async with db.transaction() as conn:
            ref = await put_artifact(conn, c.tenant_id, result.model_dump_json().encode(),
                                     media_type="application/json", max_bytes=1 << 20, at=now, read_back=False)
            await budget.close_slice_with_commit(conn, c.tenant_id, c.run_id, c.step_id, at=now)
            await finish(conn, ctx, at=now, ref=ref.ref)

    return {kind.value: handle for kind in BranchKind}


database = scratch_database  # a migrated, empty database for one run (bench/scratch.py)


def agents(db: Database, bootstrap: str, producer: BusProducer) -> tuple[StepIntake, ConsumerRunner]:
    """The agents role's shape: its own group on ira.steps.v1, and the steps this process's commits
    ready (eager dispatch), through one StepIntake."""
    dispatcher = StepDispatcher(db=db, clock=SystemClock(), handlers=instant_investigators(db, SystemClock()),
                                owner="bench-agents")
    intake = StepIntake(dispatcher, 64)
    return intake, step_consumer("bench-agents", intake, bootstrap, producer)


def step_consumer(name: str, intake: StepIntake, bootstrap: str, producer: BusProducer) -> ConsumerRunner:
    """A consumer of wake-ups on ira.steps.v1 in its own group, feeding ``intake``."""
    return ConsumerRunner(bootstrap=bootstrap, group_id=f"{name}-{new_id('g')}", topics=[topic_name(Topic.STEPS, ENV)],
                          name=name, handler=intake.wakeup, producer=producer, inbox=False,
                          dlq_topic=topic_name(Topic.DLQ, ENV), settings=FAST)


@asynccontextmanager
async def eager_steps(db: Database, intake: StepIntake, consumer: ConsumerRunner) -> AsyncIterator[None]:
    """Run ``consumer`` and ``intake``'s eager door until the block ends."""
    stop = asyncio.Event()
    with intake.eager(db):
        loop = asyncio.create_task(consumer.run(stop))
        try:
            yield
        finally:
            stop.set()
            await asyncio.wait_for(loop, timeout=30)
            await intake.drain()


@asynccontextmanager
async def stack(db: Database, bootstrap: str) -> AsyncIterator[tuple[Deps, BusProducer]]:
    clock = SystemClock()
    # Runs held waiting for the memory figure (10,000 take longer than the default 30 min approval
    # expiry to start on this machine): an expired approval would end a run the figure counts.
    config = WorkflowConfig(environment=ENV, approval_expiry=timedelta(hours=24))
    deps = Deps(db=db, clock=clock, config=config, tickets=BuiltinTicketSystem(db, clock))
    async with BusProducer(bootstrap) as producer:
        coordinator = CoordinatorWorker(
            deps, StepDispatcher(db=db, clock=clock, handlers=step_handlers(deps), owner="bench-coordinator"),
            bootstrap=bootstrap, producer=producer, consumer=FAST, max_concurrent=32,
            decisions_fetch_wait=DECISION_FETCH_WAIT)
        intake, agents_consumer = agents(db, bootstrap, producer)
        loops = [coordinator,
                 # the product's poll (tuning.relay_poll_interval): this process's commits wake it at once
                 OutboxRelay(db=db, publisher=producer, clock=clock, poll_interval=timedelta(milliseconds=200),
                             batch_size=500),
                 Scanner(db=db, clock=clock, environment=ENV, interval=timedelta(seconds=1))]
        stop = asyncio.Event()
        running = [asyncio.create_task(loop.run(stop)) for loop in loops]  # type: ignore[attr-defined]
        try:
            async with eager_steps(db, intake, agents_consumer):
                yield deps, producer
        finally:
            stop.set()
            await asyncio.wait_for(asyncio.gather(*running, return_exceptions=True), timeout=60)


async def wait_for(db: Database, state: str, count: int, *, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while True:
        async with db.reader() as conn:
            have = len((await conn.execute(select(runs.c.run_id).where(runs.c.state == state))).all())
        if have >= count:
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"only {have} of {count} runs reached {state}")
        await asyncio.sleep(0.1)


_ASKED = select(runs.c.incident_id, events.c.at, runs.c.created_at).join(
    events, (events.c.tenant_id == runs.c.tenant_id) & (events.c.run_id == runs.c.run_id)).where(
    events.c.type == "APPROVAL_REQUESTED")
_ASKED_OF = _ASKED.where(runs.c.tenant_id == bindparam("tenant"),
                         runs.c.incident_id.in_(bindparam("incidents", expanding=True)))
"""Built once: a statement built per call takes SQLAlchemy's compile path every time, CPU the
bench's own process spends beside the engine it measures."""


async def asked_at(db: Database, incidents: Sequence[str] | None = None, tenant: str = "bench") -> dict[str, float]:
    """incident_id -> when APPROVAL_REQUESTED was committed (epoch seconds): of ``incidents``
    of ``tenant`` only where given (by the runs' incident index: reading every run's, as each
    measure of bench/engine.py did, made the read, and the server's CPU it measures, grow with
    the runs already done), else of every run."""
    return {incident: asked for incident, (_created, asked) in (await created_and_asked(db, incidents, tenant)).items()}


async def created_and_asked(db: Database, incidents: Sequence[str] | None = None, tenant: str = "bench"
                            ) -> dict[str, tuple[float, float]]:
    """incident_id -> (when its run was created, when APPROVAL_REQUESTED was committed), epoch
    seconds, in the one read ``asked_at`` makes. The first, against the decision's publish, is
    the run request's way to the coordinator: mostly the embedded broker's hop (it answers a
    fetch when the fetch's wait ends, not when a record arrives)."""
    async with db.reader() as conn:
        rows = await (conn.execute(_ASKED) if incidents is None else
                      conn.execute(_ASKED_OF, {"tenant": tenant, "incidents": list(incidents)}))
        return {r.incident_id: (r.created_at.timestamp(), r.at.timestamp()) for r in rows}


async def publish(producer: BusProducer, batch: list[Envelope]) -> dict[str, float]:
    """Publish ``batch`` at once (one ``publish_many``); incident_id -> when it was sent. A burst
    starts together, as LangGraph's side starts its runs with one ``gather``: publishing one by
    one, each waiting for its ack on a loop busy with the runs already started, made the
    publisher the limit once the engine kept up with it (and left the queueing out of p50/p99)."""
    sent_at = time.time()
    topic = topic_name(Topic.INCIDENTS, ENV)
    messages = [OutboxMessage(topic=topic, key=f"{env.tenant_id}:{env.payload['incident_id']}", envelope=env)
                for env in batch]
    for attempt in range(3):  # a loaded machine can time the batch out; a twin decision finds its run
        try:
            await producer.publish_many(messages)
            break
        except BrokerUnavailableError:
            if attempt == 2:
                raise
            progress("publish of the decisions timed out: sending them again")
    return {env.payload["incident_id"]: sent_at for env in batch}


async def approve_all(deps: Deps) -> None:
    async with deps.db.reader() as conn:
        pending = (await conn.execute(select(records.approvals.c.approval_id).where(
            records.approvals.c.state == "pending"))).scalars().all()

    async def one(approval_id: str) -> None:  # as the API, the dashboard and Slack record one
        await record_decision(deps, tenant_id="bench", approval_id=approval_id, choice=Choice.APPROVE,
                              principal="bench", roles=frozenset({"approver"}))

    await asyncio.gather(*(one(a) for a in pending))


async def step_lines(db: Database, backend: str) -> list[dict]:
    async with db.reader() as conn:
        rows = (await conn.execute(select(attempts.c.step_id, attempts.c.started_at, attempts.c.ended_at)
                                   .where(attempts.c.ended_at.is_not(None)))).all()
    by_kind: dict[str, list[float]] = {}
    for r in rows:
        by_kind.setdefault(r.step_id, []).append((r.ended_at - r.started_at).total_seconds() * 1000)
    return [{"bench": "runs", "measure": "step_overhead", "backend": backend, "step": kind, "attempts": len(ms),
             "claim_to_commit_p50_ms": round(percentile(ms, 0.5), 2)} for kind, ms in sorted(by_kind.items())]


def emit(backend: str, measure: str, **fields: object) -> None:
    print(json.dumps({"bench": "runs", "measure": measure, "backend": backend, **fields}), flush=True)


async def latency_and_memory(db: Database, producer: BusProducer, *, backend: str, args: argparse.Namespace) -> None:
    idle: dict[str, float] = {}
    for env in decisions(args.probe):
        idle |= await publish(producer, [env])
        await wait_for(db, "waiting", len(idle), timeout=60)
    gc.collect()
    base_rss, base_tasks = rss_mb(), len(asyncio.all_tasks())
    progress(f"{backend}: burst of {args.ops}")
    burst = await publish(producer, decisions(args.ops))
    await wait_for(db, "waiting", args.probe + args.ops, timeout=60 + args.ops)
    asked = await asked_at(db)
    for mode, sent in (("idle", idle), ("burst", burst)):
        ms = [(asked[i] - t) * 1000 for i, t in sent.items() if i in asked]
        emit(backend, "latency", mode=mode, runs=len(ms), decision_to_waiting_p50_ms=round(percentile(ms, 0.5), 1),
             decision_to_waiting_p99_ms=round(percentile(ms, 0.99), 1))
    gc.collect()
    emit(backend, "memory", waiting_runs=args.probe + args.ops, rss_mb_probe=round(base_rss, 1),
         rss_mb_waiting=round(rss_mb(), 1), asyncio_tasks_probe=base_tasks,
         asyncio_tasks_waiting=len(asyncio.all_tasks()))


async def measure(kafka: EmbeddedKafka, backend: str, *, args: argparse.Namespace, workdir: Path) -> None:
    async with database(backend, args.database_url, workdir) as db:
        async with stack(db, kafka.bootstrap) as (deps, producer):
            progress(f"{backend}: {args.probe} decisions one at a time")
            await latency_and_memory(db, producer, backend=backend, args=args)
            total = args.probe + args.ops
            progress(f"{backend}: approving {total} runs")
            started = time.time()
            await approve_all(deps)
            await wait_for(db, "completed", total, timeout=60 + args.ops)
            elapsed = time.time() - started
            emit(backend, "throughput", runs=total, approve_to_completed_s=round(elapsed, 2),
                 completed_runs_per_min=round(total / elapsed * 60))
        for line in await step_lines(db, backend):
            print(json.dumps(line), flush=True)


async def main(args: argparse.Namespace) -> None:
    backends = args.backends or ["sqlite"] + (["postgresql"] if args.database_url else [])
    with tempfile.TemporaryDirectory(prefix="ira-bench-") as tmp:
        async with EmbeddedKafka(Path(tmp) / "kafka") as kafka:
            await ensure_topics(kafka.bootstrap, ENV, partitions=args.partitions)
            for backend in backends:
                await measure(kafka, backend, args=args, workdir=Path(tmp))


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ops", type=int, default=1000, help="runs in the burst (and waiting for memory)")
    parser.add_argument("--probe", type=int, default=20, help="decisions sent one at a time for idle latency")
    parser.add_argument("--database-url", help="also measure PostgreSQL, e.g. postgresql://postgres@127.0.0.1/test")
    parser.add_argument("--partitions", type=int, default=3)
    parser.add_argument("--backends", type=lambda s: s.split(","), help="default: sqlite, plus postgresql with a URL")
    return parser.parse_args(argv)


if __name__ == "__main__":
    asyncio.run(main(parse()))
