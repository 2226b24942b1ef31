"""Benchmark: messages/s through BusProducer -> embedded broker -> ConsumerRunner with inbox.

Not a test: it prints one JSON line per measurement on stdout (progress on stderr), e.g.

    .venv/bin/python bench/bus.py --messages 5000
    .venv/bin/python bench/bus.py --database-url postgresql://postgres@127.0.0.1:5432/test

For each backend (SQLite always, PostgreSQL when ``--database-url`` is given) and each
``--batch-sizes`` value, N envelopes are produced with ``publish_many`` (and a sample with
sequential ``publish``), then one consumer applies them: inbox row + one effect row per
message. ``consume_per_s`` counts from the first applied message to the last, so the
consumer group join (about half the session timeout on Tansu) is reported apart as ``join_s``.
The goal of the foundation issue: one consumer keeps up with ~1,000 events/s.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path

from scratch import scratch_database
from sqlalchemy import Column, Integer, MetaData, String, Table, insert
from sqlalchemy.ext.asyncio import AsyncConnection

from ira.core.commit import OutboxMessage
from ira.core.envelope import Envelope, Topic, topic_name
from ira.core.ids import new_event_id
from ira.infra.tansu import EmbeddedKafka
from ira.runtime.bus.admin import ensure_topics
from ira.runtime.bus.consumer import ConsumerRunner, ConsumerSettings
from ira.runtime.bus.producer import BusProducer
from ira.runtime.bus.record import Outcome, RecordMeta, RecordOutcome
from ira.runtime.store.database import Database

bench_metadata = MetaData()
effects = Table(
    "bench_bus_effects", bench_metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("message_id", String(64), nullable=False),
)


def progress(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


async def apply_effect(conn: AsyncConnection, envelope: Envelope, meta: RecordMeta) -> None:
    """The smallest realistic handler: one row written next to the inbox row."""
    await conn.execute(insert(effects).values(message_id=envelope.message_id))


def envelopes(count: int) -> list[Envelope]:
    now = datetime.now(UTC)
    return [Envelope(message_id=new_event_id(), type="bench.event", tenant_id="bench", occurred_at=now,
                     payload={"n": n, "labels": {"service": "order-service", "severity": "page"}})
            for n in range(count)]


@asynccontextmanager
async def database(backend: str, url: str | None, workdir: Path) -> AsyncIterator[Database]:
    """A scratch database plus the benchmark's own effect table."""
    async with scratch_database(backend, url, workdir) as db:
        async with db.transaction() as tx:
            await tx.run_sync(bench_metadata.create_all)
        yield db


async def produce(producer: BusProducer, topic: str, count: int) -> float:
    """Batched produce of ``count`` envelopes; returns messages/s."""
    messages = [OutboxMessage(topic=topic, key=f"bench:{e.payload['n'] % 16}", envelope=e) for e in envelopes(count)]
    started = time.perf_counter()
    for start in range(0, count, 1000):
        await producer.publish_many(messages[start:start + 1000])
    return count / (time.perf_counter() - started)


async def produce_sequential(producer: BusProducer, topic: str, count: int) -> float:
    """One publish at a time, each waiting for its ack (what a webhook request does)."""
    started = time.perf_counter()
    for envelope in envelopes(count):
        await producer.publish(topic, "bench:seq", envelope)
    return count / (time.perf_counter() - started)


class Clock:
    """Times the first and last applied message, as the runner reports them."""

    def __init__(self) -> None:
        self.first: float | None = None
        self.last: float | None = None

    def __call__(self, outcome: RecordOutcome) -> None:
        if outcome.outcome is Outcome.PROCESSED:
            self.last = time.perf_counter()
            self.first = self.first or self.last


async def consume(runner: ConsumerRunner, count: int, clock: Clock) -> tuple[float, float]:
    """Run the consumer until ``count`` are applied; returns (join seconds, messages/s)."""
    stop = asyncio.Event()
    started = time.perf_counter()
    task = asyncio.create_task(runner.run(stop))
    deadline = started + 60 + count / 50
    while runner.stats.processed < count and time.perf_counter() < deadline and not task.done():
        await asyncio.sleep(0.05)
    stop.set()
    await asyncio.wait_for(task, 30)
    if runner.stats.processed < count or clock.first is None or clock.last is None:
        raise RuntimeError(f"only {runner.stats.processed} of {count} applied: {runner.stats}")
    return clock.first - started, (count - 1) / max(clock.last - clock.first, 1e-9)


async def measure(kafka: EmbeddedKafka, backend: str, args: argparse.Namespace, batch: int, workdir: Path) -> dict:
    environment = f"bench{uuid.uuid4().hex[:8]}"
    await ensure_topics(kafka.bootstrap, environment, partitions=args.partitions)
    topic = topic_name(Topic.ALERTS, environment)
    async with BusProducer(kafka.bootstrap) as producer, database(backend, args.database_url, workdir) as db:
        progress(f"{backend} batch={batch}: producing {args.messages}")
        produce_rate = await produce(producer, topic, args.messages)
        sequential_rate = await produce_sequential(producer, topic_name(Topic.RUN_EVENTS, environment),
                                                   min(args.messages, 1000))
        clock = Clock()
        runner = ConsumerRunner(
            bootstrap=kafka.bootstrap, group_id=f"bench-{environment}", topics=[topic], name="bench",
            handler=apply_effect, producer=producer, dlq_topic=topic_name(Topic.DLQ, environment), db=db,
            settings=ConsumerSettings(session_timeout=timedelta(seconds=2), batch_size=batch), on_outcome=clock,
        )
        progress(f"{backend} batch={batch}: consuming")
        join, consume_rate = await consume(runner, args.messages, clock)
    return {"bench": "bus", "backend": backend, "batch_size": batch, "messages": args.messages,
            "partitions": args.partitions, "produce_per_s": round(produce_rate),
            "publish_sequential_per_s": round(sequential_rate), "consume_per_s": round(consume_rate),
            "join_s": round(join, 2)}


async def main(args: argparse.Namespace) -> None:
    backends = ["sqlite"] + (["postgresql"] if args.database_url else [])
    with tempfile.TemporaryDirectory(prefix="ira-bench-") as tmp:
        async with EmbeddedKafka(Path(tmp) / "kafka") as kafka:
            progress(f"broker on {kafka.bootstrap}")
            for backend in backends:
                for batch in args.batch_sizes:
                    print(json.dumps(await measure(kafka, backend, args, batch, Path(tmp))), flush=True)


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--messages", "--ops", type=int, default=5000, help="messages per measurement")
    parser.add_argument("--database-url", help="also measure PostgreSQL, e.g. postgresql://postgres@127.0.0.1/test")
    parser.add_argument("--batch-sizes", type=lambda s: [int(x) for x in s.split(",")], default=[1, 100],
                        help="records per transaction to measure, comma separated (default 1,100)")
    parser.add_argument("--partitions", type=int, default=3)
    return parser.parse_args(argv)


if __name__ == "__main__":
    asyncio.run(main(parse()))
