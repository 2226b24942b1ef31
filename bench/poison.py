"""Benchmark: how late good alerts are triaged when bad records stand ahead of them.

Not a test: one JSON line per measurement on stdout, progress on stderr::

    .venv/bin/python bench/poison.py --ops 200 --poison 20
    .venv/bin/python bench/poison.py --ops 200 --poison 20 --database-url postgresql://postgres@127.0.0.1:5432/test

On the embedded broker, one partition, the real TriageHandler in the ConsumerRunner's batched
inbox mode: ``--poison`` bad records, then ``--ops`` good alerts behind them (one request's
worth, as in issue #15: a bad request ahead of good ones). Kinds of bad record:

* ``transient``: their handler fails with StoreUnavailableError for ``--transient-for``
  seconds after the first failure (a database blip that only their rows meet), then works;
* ``bug``: their handler always raises a RuntimeError (outside ira's error tree);
* ``permanent``: their handler raises a DomainError (a rule's refusal);
* ``column`` (PostgreSQL only): real alerts whose name is longer than its column (as if the
  edge had let them through): the database refuses them with a DataError.

Each kind is measured with ``consumer.max_hold`` = 1 s (parking, this version) and with
max_hold = 1 h, which is exactly the runner before parking: in place until success (transient)
or the 5th try (bug). ``good_done_s``: from the first failure of the first bad record to the
last good alert triaged; ``bad_settled_s``: until every bad record had its outcome (applied from
the park, or dead-lettered); ``good_tries_per_bad``: handler tries of bad records per bad record.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
import time
import uuid
from datetime import timedelta
from pathlib import Path
from typing import Any

from scratch import scratch_database
from triage import _message, _publish, events, noise_state, progress

from ira.core.alert import AlertEvent
from ira.core.clock import SystemClock
from ira.core.envelope import Envelope, Topic, topic_name
from ira.core.errors import DomainError, StoreUnavailableError
from ira.infra.tansu import EmbeddedKafka
from ira.runtime.bus.admin import ensure_topics
from ira.runtime.bus.consumer import ConsumerRunner, ConsumerSettings
from ira.runtime.bus.producer import BusProducer
from ira.runtime.bus.record import Outcome, RecordMeta, RecordOutcome
from ira.runtime.settings.triage import TriageSettings
from ira.runtime.store.database import Database
from ira.triage.noise import NoiseState
from ira.triage.worker import TriageHandler

HOLDS = {"parked (max_hold 1 s)": timedelta(seconds=1), "in place (max_hold 1 h)": timedelta(hours=1)}


class Failing:
    """The triage handler, failing the bad records the way ``kind`` says; notes when things happened."""

    def __init__(self, triage: TriageHandler, kind: str, bad: set[str], *, transient_for: float) -> None:
        self.triage, self.kind, self.bad, self.transient_for = triage, kind, bad, transient_for
        self.first_failure: float | None = None
        self.tries = 0

    async def __call__(self, conn: Any, envelope: Envelope, meta: RecordMeta) -> None:
        if envelope.message_id in self.bad:
            self.tries += 1
            self.first_failure = self.first_failure or time.perf_counter()
            if self.kind == "bug":
                raise RuntimeError("a bug in a handler")
            if self.kind == "permanent":
                raise DomainError("refused by a rule")
            if self.kind == "transient" and time.perf_counter() - self.first_failure < self.transient_for:
                raise StoreUnavailableError("the database did not answer")
        await self.triage(conn, envelope, meta)


class Clocked:
    """When the last good alert and the last bad record had their outcomes."""

    def __init__(self, bad: set[str], good: int) -> None:
        self.bad, self.good_left, self.bad_left = bad, good, len(bad)
        self.good_done: float | None = None
        self.bad_done: float | None = None

    def __call__(self, outcome: RecordOutcome) -> None:
        if outcome.outcome in (Outcome.RETRIED, Outcome.PARKED):
            return
        is_bad = outcome.meta.headers.get("event_id") in self.bad
        if is_bad:
            self.bad_left -= 1
            self.bad_done = time.perf_counter() if not self.bad_left else None
        else:
            self.good_left -= 1
            self.good_done = time.perf_counter() if not self.good_left else None


def bad_records(kind: str, count: int) -> list[Any]:
    """``count`` bad messages: for ``column`` alerts too long for the store, else ordinary ones."""
    if kind != "column":
        return events(count)
    return [_message(AlertEvent.model_validate({**m.envelope.payload, "name": "x" * 300}))
            for m in events(count)]


async def measure(kafka: EmbeddedKafka, producer: BusProducer, db: Database, noise: NoiseState, *,
                  kind: str, hold: timedelta, args: argparse.Namespace) -> dict[str, Any]:
    environment = f"poison{uuid.uuid4().hex[:8]}"
    await ensure_topics(kafka.bootstrap, environment, partitions=1)
    topic, bad, good = topic_name(Topic.ALERTS, environment), bad_records(kind, args.poison), events(args.ops)
    bad_ids = {m.envelope.message_id for m in bad}
    await _publish(producer, topic, bad + good)
    triage = TriageHandler(settings=TriageSettings(), environment=environment, clock=SystemClock(), noise=noise)
    handler, clocked = Failing(triage, kind, bad_ids, transient_for=args.transient_for), Clocked(bad_ids, len(good))
    runner = ConsumerRunner(
        bootstrap=kafka.bootstrap, group_id=f"bench-{environment}", name="triage", topics=[topic], handler=handler,
        producer=producer, dlq_topic=topic_name(Topic.DLQ, environment), db=db, on_outcome=clocked,
        batch_hooks=triage, settings=ConsumerSettings(
            session_timeout=timedelta(seconds=2), fetch_wait=timedelta(milliseconds=100), batch_size=100,
            max_hold=hold, park_poll=timedelta(milliseconds=200)))
    stop = asyncio.Event()
    task = asyncio.create_task(runner.run(stop))
    deadline = time.perf_counter() + 60 + args.poison * 3 + args.transient_for
    while (clocked.good_done is None or clocked.bad_done is None) and time.perf_counter() < deadline:
        await asyncio.sleep(0.05)
    stop.set()
    await asyncio.wait_for(task, 60)
    start = handler.first_failure or time.perf_counter()
    return {"good": len(good), "bad": len(bad), "good_done_s": _since(start, clocked.good_done),
            "bad_settled_s": _since(start, clocked.bad_done), "parked": runner.stats.parked,
            "dead_lettered": runner.stats.dead_lettered,
            "bad_tries_per_record": round(handler.tries / max(len(bad), 1), 1) if kind != "column" else None}


def _since(start: float, end: float | None) -> float | None:
    return None if end is None else round(max(end - start, 0.0), 2)


async def main(args: argparse.Namespace) -> None:
    backends = ["sqlite"] + (["postgresql"] if args.database_url else [])
    noise, client = await noise_state(args.redis_url)
    with tempfile.TemporaryDirectory(prefix="ira-bench-") as tmp:
        async with EmbeddedKafka(Path(tmp) / "kafka") as kafka, BusProducer(kafka.bootstrap) as producer:
            for backend in backends:
                for kind in [k for k in args.kinds if k != "column" or backend == "postgresql"]:
                    for label, hold in HOLDS.items():
                        async with scratch_database(backend, args.database_url, Path(tmp)) as db:
                            progress(f"{backend}: {args.poison} {kind} bad records, {label}")
                            result = await measure(kafka, producer, db, noise, kind=kind, hold=hold, args=args)
                        print(json.dumps({"bench": "poison", "backend": backend, "kind": kind, "mode": label,
                                          "max_hold_s": hold.total_seconds(), **result}), flush=True)
    if client is not None:
        await client.aclose()


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ops", type=int, default=200, help="good alerts behind the bad records")
    parser.add_argument("--poison", type=int, default=10, help="bad records ahead of them")
    parser.add_argument("--kinds", nargs="+", default=["transient", "bug", "permanent", "column"])
    parser.add_argument("--transient-for", type=float, default=5.0, help="seconds a transient failure lasts")
    parser.add_argument("--database-url", help="also measure PostgreSQL, e.g. postgresql://postgres@127.0.0.1/test")
    parser.add_argument("--redis-url", default="redis://127.0.0.1:6379/0", help="noise state; '' to switch it off")
    return parser.parse_args(argv)



if __name__ == "__main__":
    asyncio.run(main(parse()))
