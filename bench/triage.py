"""Benchmark: alert events/s through triage (consumer + inbox + incident grouping + evaluation + outbox).

Not a test: one JSON line per measurement on stdout, progress on stderr::

    .venv/bin/python bench/triage.py --ops 20000
    .venv/bin/python bench/triage.py --ops 20000 --database-url postgresql://postgres@127.0.0.1:5432/test

Per backend (SQLite always, PostgreSQL with ``--database-url``) two measurements, on the
embedded broker with the real TriageHandler in the ConsumerRunner's batched inbox mode:

* ``drain``: ``--ops`` events already on the topic, consumed as fast as triage can:
  ``events_per_s`` from the first applied event to the last.
* ``sustained``: events produced at ``--rate`` per second for ``--ops`` events (by a producer
  in a child process, as the sources role would be) while triage consumes; the consumer's lag
  (sum over partitions) is sampled every second while producing.
  ``kept_up`` is true when the lag in the second half of the run stayed below one second's
  worth of events and its least-squares slope (``lag_slope_per_s``) is under 5% of the rate.
  ``consumed_per_s`` counts from the first applied event to the last.
* ``storm``: 10 incidents each with an active run, then ``--ops`` distinct follow-ups to them
  already on the topic, drained as fast as triage can: ``events_per_s`` and the outbox rows
  written per follow-up (coalesced incident updates: a few per incident and interval).

The event mix: groups of 5 alerts (one service each) firing, then resolving; about one group
in ten is re-sent as a duplicate under a new event id (a sender's retry). So every tenth event
opens an incident (create_run + outbox row), the rest join, are ignored by cooldown, resolve,
or are caught by the source-identity dedupe. The noise state is read from Redis when
``--redis-url`` answers (as in production), else switched off.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import json
import os
import pstats
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

from redis.asyncio import Redis
from scratch import scratch_database
from sqlalchemy import func, select

from ira.core.alert import AlertEvent, AlertStatus, Severity, SourceKind
from ira.core.clock import SystemClock
from ira.core.commit import NewRun, OutboxMessage
from ira.core.envelope import Envelope, Topic, topic_name
from ira.infra.tansu import EmbeddedKafka
from ira.runtime.bus.admin import ensure_topics
from ira.runtime.bus.consumer import ConsumerRunner, ConsumerSettings
from ira.runtime.bus.producer import BusProducer
from ira.runtime.bus.record import Outcome, RecordOutcome
from ira.runtime.settings import Settings
from ira.runtime.settings.triage import TriageSettings
from ira.runtime.store import runs
from ira.runtime.store.database import Database
from ira.runtime.store.schema import outbox
from ira.runtime.telemetry import setup_tracing
from ira.triage.noise import NoiseState, NoNoiseState, RedisNoiseState
from ira.triage.tables import incidents
from ira.triage.worker import TriageHandler

GROUP = 5


def progress(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def _alert(group: int, member: int, status: AlertStatus, *, at: datetime, run: str) -> AlertEvent:
    fingerprint = f"{run}-{group}-{member}"
    return AlertEvent(
        event_id=str(uuid.uuid4()), tenant_id="bench", source_id="am", source_kind=SourceKind.ALERTMANAGER,
        source_event_id=f"{fingerprint}:{status.value}", fingerprint=fingerprint, status=status,
        name="HighErrorRate", severity=Severity.CRITICAL, labels={"alertname": "HighErrorRate", "pod": f"p{member}"},
        annotations={"summary": "error rate above 5%"}, starts_at=at, ends_at=at if status == "resolved" else None,
        received_at=at, environment="prod", service=f"svc-{run}-{group}")


def events(count: int, *, per_trace: int = 0) -> list[OutboxMessage]:
    """The mix: per group 5 firing then 5 resolved; every tenth group sends one event twice.

    With ``per_trace`` every ``per_trace`` consecutive events carry one W3C ``traceparent`` (the
    gateway's request span, as the alerts of one webhook request do); else none."""
    run, now, out = uuid.uuid4().hex[:6], datetime.now(UTC), []
    group = 0
    while len(out) < count:
        batch = [_alert(group, m, s, at=now + timedelta(seconds=i), run=run)
                 for i, (s, m) in enumerate((s, m) for s in (AlertStatus.FIRING, AlertStatus.RESOLVED)
                                            for m in range(GROUP))]
        if group % 10 == 9:
            batch.insert(3, batch[2].model_copy(update={"event_id": str(uuid.uuid4())}))
        out += batch
        group += 1
    return [_message(e, traceparent=_traceparent(i, per_trace)) for i, e in enumerate(out[:count])]


def _traceparent(index: int, per_trace: int) -> str | None:
    """The request trace of event ``index`` when every ``per_trace`` events share one (sampled out, as
    ``ira dev``'s gateway sends them: flag 00)."""
    if per_trace <= 0:
        return None
    request = index // per_trace
    return f"00-{uuid.uuid5(uuid.NAMESPACE_OID, str(request)).hex}-{request + 1:016x}-00"


def _message(alert: AlertEvent, *, traceparent: str | None = None) -> OutboxMessage:
    envelope = Envelope(message_id=alert.event_id, type="alert.received", tenant_id=alert.tenant_id,
                        occurred_at=alert.received_at, traceparent=traceparent,
                        payload=alert.model_dump(mode="json"))
    return OutboxMessage(topic="", key=f"{alert.tenant_id}:{alert.fingerprint}", envelope=envelope)


database = scratch_database  # a migrated, empty database for one run (bench/scratch.py)


class Timing:
    """First and last applied event, as the runner reports them."""

    def __init__(self) -> None:
        self.first: float | None = None
        self.last: float | None = None

    def __call__(self, outcome: RecordOutcome) -> None:
        if outcome.outcome in (Outcome.PROCESSED, Outcome.DUPLICATE):
            self.last = time.perf_counter()
            self.first = self.first or self.last

    def rate(self, count: int) -> int:
        """Events/s from the first applied event to the last."""
        if self.first is None or self.last is None or count < 2:
            return 0
        return round((count - 1) / max(self.last - self.first, 1e-9))


@dataclass(frozen=True)
class Rig:
    """What every measurement runs on."""

    kafka: EmbeddedKafka
    producer: BusProducer
    noise: NoiseState
    args: argparse.Namespace


def _runner(rig: Rig, db: Database, *, environment: str, timing: Callable[[RecordOutcome], None]) -> ConsumerRunner:
    args = rig.args
    session = timedelta(seconds=2 if args.slowdown == 1 else 15)  # heartbeats lag under callgrind
    handler = TriageHandler(settings=TriageSettings(), environment=environment, clock=SystemClock(), noise=rig.noise)
    return ConsumerRunner(
        bootstrap=rig.kafka.bootstrap, group_id=f"bench-triage-{environment}", name="triage",
        topics=[topic_name(Topic.ALERTS, environment)], handler=handler, producer=rig.producer,
        dlq_topic=topic_name(Topic.DLQ, environment), db=db, on_outcome=timing, batch_hooks=handler,
        settings=ConsumerSettings(session_timeout=session, fetch_wait=timedelta(milliseconds=100),
                                  batch_size=args.batch_size, max_records=args.batch_size * 2))


def _done(runner: ConsumerRunner) -> int:
    return runner.stats.processed + runner.stats.duplicates + runner.stats.dead_lettered


async def _publish(producer: BusProducer, topic: str, messages: list[OutboxMessage]) -> None:
    await producer.publish_many([m.model_copy(update={"topic": topic}) for m in messages])


async def drain(rig: Rig, db: Database) -> dict:
    args, environment = rig.args, f"bench{uuid.uuid4().hex[:8]}"
    await ensure_topics(rig.kafka.bootstrap, environment, partitions=args.partitions)
    messages, topic = events(args.ops, per_trace=args.per_trace), topic_name(Topic.ALERTS, environment)
    for start in range(0, len(messages), 1000):
        await _publish(rig.producer, topic, messages[start:start + 1000])
    timing = Timing()
    runner = _runner(rig, db, environment=environment, timing=timing)
    stop = asyncio.Event()
    with Measured(args) as measured:  # this process's CPU (consumer + triage; the broker is another process)
        task = asyncio.create_task(runner.run(stop))
        deadline = time.perf_counter() + (120 + args.ops / 100) * args.slowdown
        while _done(runner) < args.ops and time.perf_counter() < deadline and not task.done():
            await asyncio.sleep(0.05)
    cpu = measured.cpu
    stop.set()
    await asyncio.wait_for(task, 60)
    if _done(runner) < args.ops or timing.first is None or timing.last is None:
        raise RuntimeError(f"only {_done(runner)} of {args.ops} applied: {runner.stats}")
    return {"events": args.ops, "events_per_s": timing.rate(args.ops),
            "cpu_ms_per_event": round(cpu * 1000 / args.ops, 3), "retries": runner.stats.retries}


class Measured:
    """The measured part of a run: this process's CPU seconds; with ``--profile`` under cProfile
    (the event loop thread's CPU, printed to stderr), with ``--callgrind`` under callgrind's
    instruction counting when this process runs under it (``callgrind_control``)."""

    def __init__(self, args: argparse.Namespace) -> None:
        self._args, self.cpu = args, 0.0
        self._profiler = cProfile.Profile(time.thread_time) if args.profile else None

    def __enter__(self) -> Measured:
        if self._args.callgrind:
            _callgrind("--instr=on")
        if self._profiler is not None:
            self._profiler.enable()
        self.cpu = time.process_time()
        return self

    def __exit__(self, *exc: object) -> None:
        self.cpu = time.process_time() - self.cpu
        if self._profiler is not None:
            self._profiler.disable()
            if self._args.profile_out:
                self._profiler.dump_stats(self._args.profile_out)
            stats = pstats.Stats(self._profiler, stream=sys.stderr)
            stats.sort_stats(self._args.profile).print_stats(self._args.profile_lines)
        if self._args.callgrind:
            _callgrind("--instr=off")


def _callgrind(switch: str) -> None:
    """Switch callgrind's instrumentation of this process (started with ``--instr-atstart=no``)."""
    subprocess.run(["callgrind_control", switch, str(os.getpid())], check=True, capture_output=True)


def under_callgrind() -> bool:
    """Whether valgrind runs this process (its preload library is mapped)."""
    return "vgpreload" in Path("/proc/self/maps").read_text()


CALLGRIND_HOW = """--callgrind counts the instructions of the measured part only (drain: all of it; storm:
the follow-ups); run it under callgrind with the instrumentation off until then:
    valgrind --tool=callgrind --instr-atstart=no --callgrind-out-file=/tmp/triage.%p.out \\
        .venv/bin/python bench/triage.py --modes drain --ops 3000 --callgrind [--per-trace 100 --sdk-tracing]
The file's "totals:" line over --ops is the instructions per event; the difference of two --ops
(1000 and 3000) over 2000 leaves the group join and the first fetch out."""


FOLLOW_UP_INCIDENTS = 10


def follow_ups(count: int, *, run: str, per_trace: int = 0) -> list[OutboxMessage]:
    """A storm: ``count`` distinct alerts (a new fingerprint each) into the incidents of :func:`openers`."""
    now = datetime.now(UTC)
    return [_message(_alert(i % FOLLOW_UP_INCIDENTS, 1 + i, AlertStatus.FIRING, at=now, run=run),
                     traceparent=_traceparent(i, per_trace)) for i in range(count)]


async def _start_runs(db: Database) -> int:
    """What the coordinator's C1 does for every open incident: a run, so what follows is a follow-up."""
    async with db.transaction() as conn:
        found = (await conn.execute(select(incidents.c.tenant_id, incidents.c.incident_id))).all()
        for tenant_id, incident_id in found:
            await runs.create_run(conn, NewRun(
                tenant_id=tenant_id, run_id=f"run-{uuid.uuid4().hex}", task_id=f"task-{uuid.uuid4().hex}",
                task_kind="diagnose", subject_ref=incident_id, workflow="incident-diagnosis@1",
                incident_id=incident_id), at=datetime.now(UTC))
    return len(found)


async def _outbox_rows(db: Database) -> int:
    async with db.reader() as conn:
        return int((await conn.execute(select(func.count()).select_from(outbox))).scalar_one())


async def storm(rig: Rig, db: Database) -> dict:
    """``--ops`` follow-ups to 10 incidents with active runs, already on the topic, drained as fast as
    triage can (by a new member of the group: the incidents were opened by another before their runs
    started): events/s, CPU per follow-up, and outbox rows written per follow-up (one each before
    updates were coalesced)."""
    args, environment, run = rig.args, f"bench{uuid.uuid4().hex[:8]}", uuid.uuid4().hex[:6]
    await ensure_topics(rig.kafka.bootstrap, environment, partitions=args.partitions)
    topic = topic_name(Topic.ALERTS, environment)
    now = datetime.now(UTC)
    openers = [_message(_alert(g, 0, AlertStatus.FIRING, at=now, run=run)) for g in range(FOLLOW_UP_INCIDENTS)]
    opening, stop = _runner(rig, db, environment=environment, timing=Timing()), asyncio.Event()
    task = asyncio.create_task(opening.run(stop))
    await _publish(rig.producer, topic, openers)
    while _done(opening) < len(openers) and not task.done():
        await asyncio.sleep(0.05)
    stop.set()  # it commits and leaves the group: the follow-ups wait on the topic for the next member
    await asyncio.wait_for(task, 60)
    started_runs, before = await _start_runs(db), await _outbox_rows(db)
    messages = follow_ups(args.ops, run=run, per_trace=args.per_trace)
    for start in range(0, len(messages), 1000):
        await _publish(rig.producer, topic, messages[start:start + 1000])
    timing = Timing()
    runner, stop = _runner(rig, db, environment=environment, timing=timing), asyncio.Event()
    deadline = time.perf_counter() + (120 + args.ops / 100) * args.slowdown
    with Measured(args) as measured:  # like drain: the group join, then the follow-ups as fast as triage can
        task = asyncio.create_task(runner.run(stop))
        while _done(runner) < args.ops and time.perf_counter() < deadline and not task.done():
            await asyncio.sleep(0.05)
    stop.set()
    await asyncio.wait_for(task, 60)
    if _done(runner) < args.ops:
        raise RuntimeError(f"only {_done(runner)} of {args.ops} applied: {runner.stats}")
    rows = await _outbox_rows(db) - before
    return {"events": args.ops, "incidents_with_runs": started_runs, "events_per_s": timing.rate(args.ops),
            "cpu_ms_per_event": round(measured.cpu * 1000 / args.ops, 3),
            "outbox_rows_per_event": round(rows / args.ops, 4), "retries": runner.stats.retries}


async def sustained(rig: Rig, db: Database) -> dict:
    """Triage consumes while a producer in another process sends ``--rate`` events/s."""
    args, environment = rig.args, f"bench{uuid.uuid4().hex[:8]}"
    await ensure_topics(rig.kafka.bootstrap, environment, partitions=args.partitions)
    topic = topic_name(Topic.ALERTS, environment)
    warm, timing = Timing(), Timing()
    runner = _runner(rig, db, environment=environment, timing=lambda o: (timing if warm.first else warm)(o))
    stop = asyncio.Event()
    task = asyncio.create_task(runner.run(stop))
    await _publish(rig.producer, topic, events(1))
    while _done(runner) < 1 and not task.done():  # the group join is not part of the measurement
        await asyncio.sleep(0.05)
    started = time.perf_counter()
    samples, produced = await _produce_elsewhere(rig, topic, runner=runner)
    while _done(runner) < args.ops and time.perf_counter() - started < 600 and not task.done():
        await asyncio.sleep(0.05)
    drained = time.perf_counter() - started
    stop.set()
    await asyncio.wait_for(task, 60)
    return {"events": args.ops, "target_rate": args.rate, "produced_per_s": produced, "consumed": _done(runner),
            "consumed_per_s": timing.rate(_done(runner) - 1), "drained_s": round(drained, 1),
            "lag_samples": samples, "max_lag": max(samples, default=0),
            "lag_slope_per_s": round(_slope(samples), 1), "kept_up": _kept_up(samples, args.rate)}


async def _produce_elsewhere(rig: Rig, topic: str, *, runner: ConsumerRunner) -> tuple[list[int], int]:
    """Run ``--produce`` in a child process (so producing does not share triage's CPU and loop),
    sampling triage's lag every second until the child is done; returns (samples, its rate)."""
    child = await asyncio.create_subprocess_exec(
        sys.executable, __file__, "--produce", topic, "--bootstrap", rig.kafka.bootstrap,
        "--ops", str(rig.args.ops - 1), "--rate", str(rig.args.rate), stdout=asyncio.subprocess.PIPE)
    samples: list[int] = []
    while child.returncode is None:
        try:
            await asyncio.wait_for(child.wait(), 1.0)
        except TimeoutError:
            samples.append(sum(runner.lag().values()))
    output = (await child.stdout.read()).decode() if child.stdout else ""
    return samples, json.loads(output or '{"produced_per_s": 0}')["produced_per_s"]


async def produce(topic: str, bootstrap: str, *, ops: int, rate: int) -> None:
    """``--produce``: send ``ops`` events at ``rate``/s in 100 ms ticks; print the achieved rate."""
    messages = events(ops)
    per_tick = max(1, rate // 10)
    async with BusProducer(bootstrap) as producer:
        started = time.perf_counter()
        for tick, start in enumerate(range(0, len(messages), per_tick)):
            await _publish(producer, topic, messages[start:start + per_tick])
            await asyncio.sleep(max(0.0, started + (tick + 1) / 10 - time.perf_counter()))
        print(json.dumps({"produced_per_s": round(len(messages) / (time.perf_counter() - started))}), flush=True)


def _slope(samples: list[int]) -> float:
    """Least-squares growth of the lag, in events per second (samples are one second apart)."""
    if len(samples) < 2:
        return 0.0
    xs = range(len(samples))
    mean_x, mean_y = statistics.mean(xs), statistics.mean(samples)
    return sum((x - mean_x) * (y - mean_y) for x, y in zip(xs, samples, strict=True)) / sum(
        (x - mean_x) ** 2 for x in xs)


def _kept_up(samples: list[int], rate: int) -> bool:
    """Flat: in the second half never a second of events behind, and not growing by 5% of the rate per second."""
    if not samples:
        return False
    second_half = samples[len(samples) // 2:]
    return max(second_half) < rate and _slope(samples) < rate * 0.05


async def noise_state(url: str | None) -> tuple[NoiseState, Redis | None]:
    if not url:
        return NoNoiseState(), None
    client = Redis.from_url(url, socket_connect_timeout=0.5)
    try:
        await client.ping()
    except Exception:  # no Redis here: measure without the noise read
        await client.aclose()
        return NoNoiseState(), None
    return RedisNoiseState(client, prefix=f"bench:{uuid.uuid4().hex[:6]}:"), client


async def main(args: argparse.Namespace) -> None:
    if args.sdk_tracing:  # as every ``ira`` process does: spans sampled out, ids still made
        setup_tracing(Settings())
    backends = ["sqlite"] + (["postgresql"] if args.database_url else [])
    noise, client = await noise_state(args.redis_url)
    with tempfile.TemporaryDirectory(prefix="ira-bench-") as tmp:
        async with EmbeddedKafka(Path(tmp) / "kafka") as kafka, BusProducer(kafka.bootstrap) as producer:
            progress(f"broker on {kafka.bootstrap}; noise state: {type(noise).__name__}")
            for backend in backends:
                for mode in (m for m in (drain, sustained, storm) if m.__name__ in args.modes.split(",")):
                    async with database(backend, args.database_url, Path(tmp)) as db:
                        progress(f"{backend}: {mode.__name__} of {args.ops} events")
                        result = await mode(Rig(kafka, producer, noise, args), db)
                    line = {"bench": "triage", "mode": mode.__name__, "backend": backend,
                            "batch_size": args.batch_size, "partitions": args.partitions,
                            "noise": type(noise).__name__, **result}
                    print(json.dumps(line), flush=True)
    if client is not None:
        await client.aclose()


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ops", type=int, default=20_000, help="events per measurement")
    parser.add_argument("--rate", type=int, default=1_000, help="events/s produced in the sustained run")
    parser.add_argument("--database-url", help="also measure PostgreSQL, e.g. postgresql://postgres@127.0.0.1/test")
    parser.add_argument("--redis-url", default="redis://127.0.0.1:6379/0", help="noise state; '' to switch it off")
    parser.add_argument("--batch-size", type=int, default=200, help="events per database transaction")
    parser.add_argument("--partitions", type=int, default=3)
    parser.add_argument("--modes", default="drain,sustained,storm", help="which measurements (comma-separated)")
    parser.add_argument("--per-trace", type=int, default=0, metavar="N",
                        help="every N consecutive events share one traceparent (a webhook request's); 0: none")
    parser.add_argument("--sdk-tracing", action="store_true",
                        help="install the SDK tracer provider as ira's processes do (ALWAYS_OFF, ids made)")
    parser.add_argument("--profile", nargs="?", const="tottime", metavar="SORT",
                        help="run the measured part under cProfile; print the top functions (by SORT) to stderr")
    parser.add_argument("--profile-lines", type=int, default=40)
    parser.add_argument("--profile-out", metavar="FILE", help="also save the profile (pstats) to FILE")
    parser.add_argument("--callgrind", action="store_true",
                        help="count the measured part's instructions under callgrind (drain; says how if not under it)")
    parser.add_argument("--produce", metavar="TOPIC", help=argparse.SUPPRESS)  # the sustained run's producer
    parser.add_argument("--bootstrap", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    args.slowdown = 50 if args.callgrind else 1
    return args


if __name__ == "__main__":
    parsed = parse()
    if parsed.callgrind and not under_callgrind():
        print(CALLGRIND_HOW, file=sys.stderr)
        sys.exit(2)
    if parsed.produce:
        asyncio.run(produce(parsed.produce, parsed.bootstrap, ops=parsed.ops, rate=parsed.rate))
    else:
        asyncio.run(main(parsed))
