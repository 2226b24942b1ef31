"""Poison records leave the partition: a permanent failure is dead-lettered after one try, a
transient one holds its partition at most ``max_hold``, is parked in the store and retried from
there until it is applied, exactly once. Real broker (Tansu), SQLite and PostgreSQL.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Sequence
from dataclasses import replace
from datetime import timedelta

import asyncpg
import pytest
from aiokafka import TopicPartition
from sqlalchemy import insert, text
from sqlalchemy.ext.asyncio import AsyncConnection

from ira.core.clock import SystemClock
from ira.core.commit import OutboxMessage
from ira.core.envelope import DeadLetter, Envelope, Topic, topic_name
from ira.core.errors import ConcurrentUpdateError, IllegalTransitionError
from ira.infra.tansu import EmbeddedKafka
from ira.runtime.bus.consumer import ConsumerRunner, ConsumerSettings
from ira.runtime.bus.inbox import BatchHooks
from ira.runtime.bus.park import ParkingLot
from ira.runtime.bus.producer import BusProducer
from ira.runtime.bus.record import InboxHandler, RecordMeta
from ira.runtime.store import parked as park_store
from ira.runtime.store.database import Database
from ira.runtime.store.parked import ParkedRecord, ParkedState, ParkSummary, parked_of
from ira.runtime.telemetry import Metrics
from ira.runtime.wiring import set_park
from tests.eventually import eventually
from tests.runtime import test_bus
from tests.runtime.test_bus import (
    FAST,
    KEY,
    applied,
    committed_offset,
    envelope,
    read_topic,
    recording_handler,
    running,
)
from tests.store_fixtures import count_opened, postgres_test_url

db, producer = test_bus.db, test_bus.producer  # the bus tests' fixtures: a database with its effects table

CONSUMER = "park-test"
NO_REDRIVE = timedelta(hours=1)
PARKING = replace(FAST, max_hold=timedelta(milliseconds=300), park_poll=timedelta(milliseconds=100),
                  retry_backoff=timedelta(milliseconds=50), max_retry_backoff=timedelta(milliseconds=200))
BOTH = pytest.mark.parametrize("db", ["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)],
                               indirect=True)


def parking_runner(bus_env: str, kafka: EmbeddedKafka, producer: BusProducer, handler: InboxHandler, db: Database,
                   *, settings: ConsumerSettings = PARKING, topic: Topic = Topic.ALERTS,
                   batch_hooks: BatchHooks | None = None) -> ConsumerRunner:
    summaries: list[ParkSummary] = []
    runner = ConsumerRunner(
        bootstrap=kafka.bootstrap, group_id=f"g-{uuid.uuid4().hex[:8]}", name=CONSUMER, handler=handler,
        topics=[topic_name(topic, bus_env)], producer=producer, dlq_topic=topic_name(Topic.DLQ, bus_env), db=db,
        settings=settings, on_parked=summaries.append, batch_hooks=batch_hooks)
    runner.summaries = summaries  # type: ignore[attr-defined]
    return runner


BATCHED = replace(PARKING, batch_size=100)


async def publish_at_once(producer: BusProducer, bus_env: str, envelopes: Sequence[Envelope]) -> None:
    """In one produce, so the consumer fetches them as one batch."""
    topic = topic_name(Topic.ALERTS, bus_env)
    await producer.publish_many([OutboxMessage(topic=topic, key=KEY, envelope=e) for e in envelopes])


class Gate:
    """A handler failing every try of the records marked ``stuck`` until released; counts tries."""

    def __init__(self, error: Exception) -> None:
        self.error, self.released = error, asyncio.Event()
        self.tries: dict[str, int] = {}

    async def __call__(self, conn: AsyncConnection, env: Envelope, meta: RecordMeta) -> None:
        self.tries[env.message_id] = self.tries.get(env.message_id, 0) + 1
        if env.payload.get("stuck") and not self.released.is_set():
            raise self.error
        await recording_handler(conn, env, meta)


async def rows(db: Database) -> list[tuple[str, str, int, str]]:
    async with db.reader() as conn:
        return [(r.message_id, r.state, r.attempts, r.error_code) for r in await parked_of(conn, CONSUMER)]


async def refuse_one(bus_env: str, kafka: EmbeddedKafka, producer: BusProducer, handler: InboxHandler,
                     db: Database, **payload: object) -> tuple[ConsumerRunner, Envelope, Envelope]:
    """A record ``handler`` refuses ahead of a good one, consumed until both have their outcome."""
    topic = topic_name(Topic.ALERTS, bus_env)
    refused, good = envelope(**payload), envelope()
    for env in (refused, good):
        await producer.publish(topic, KEY, env)
    consumer = parking_runner(bus_env, kafka, producer, handler, db)
    async with running(consumer):
        await eventually(lambda: consumer.stats.processed == 1 and consumer.stats.dead_lettered == 1)
        await eventually(lambda: any(s.dead_lettered == 1 for s in consumer.summaries))  # type: ignore[attr-defined]
    return consumer, refused, good


@BOTH
async def test_a_transient_failure_is_parked_after_max_hold_and_applied_once_from_the_store(
    kafka: EmbeddedKafka, bus_env: str, producer: BusProducer, db: Database
) -> None:
    # Given a record that fails transiently for as long as the test says, ahead of good ones
    topic = topic_name(Topic.ALERTS, bus_env)
    gate = Gate(ConcurrentUpdateError("incident i-1 moved on"))
    stuck, good = envelope(stuck=True), [envelope() for _ in range(3)]
    sent = [await producer.publish(topic, KEY, env) for env in (stuck, *good)]
    consumer = parking_runner(bus_env, kafka, producer, gate, db)

    async with running(consumer):
        # When it keeps failing past max_hold, the records behind it are applied while it still fails
        await eventually(lambda: consumer.stats.processed == 3, timeout=15)
        assert await applied(db) == [g.message_id for g in good]
        assert not gate.released.is_set() and consumer.stats.parked == 1
        [(message_id, state, attempts, code)] = await rows(db)
        assert (message_id, state, code) == (stuck.message_id, ParkedState.PARKED, "concurrent_update")
        assert attempts >= 1
        tp = TopicPartition(topic, sent[-1].partition)
        assert await committed_offset(kafka, consumer.group_id, tp) == sent[-1].offset + 1
        await eventually(lambda: any(s.parked == 1 for s in consumer.summaries))  # type: ignore[attr-defined]
        # ... and once the failure clears, the parked record is applied from the store, once
        gate.released.set()
        await eventually(lambda: consumer.stats.processed == 4, timeout=15)
        await eventually(lambda: consumer.summaries[-1] == ParkSummary())  # type: ignore[attr-defined]

    assert sorted(await applied(db)) == sorted([stuck.message_id, *(g.message_id for g in good)])
    assert await rows(db) == [] and consumer.stats.dead_lettered == 0
    assert gate.tries[stuck.message_id] >= 3 and all(gate.tries[g.message_id] == 1 for g in good)


async def test_a_run_of_failing_records_holds_its_partition_once_not_once_each(
    kafka: EmbeddedKafka, bus_env: str, producer: BusProducer, db: Database
) -> None:
    # Given ten records failing transiently ahead of a good one
    topic = topic_name(Topic.ALERTS, bus_env)
    gate = Gate(ConcurrentUpdateError("busy"))
    stuck, good = [envelope(stuck=True) for _ in range(10)], envelope()
    for env in (*stuck, good):
        await producer.publish(topic, KEY, env)
    consumer = parking_runner(bus_env, kafka, producer, gate, db, settings=replace(PARKING, park_poll=NO_REDRIVE))

    async with running(consumer):
        await eventually(lambda: consumer.stats.processed == 1, timeout=15)

    # Then the ten share one hold of 300 ms: the first waits 50 + 100 ms (200 more would overdraw
    # it), the second the 150 ms left, and each later one is parked at its first failure
    assert [gate.tries[e.message_id] for e in stuck] == [3, 3] + [1] * 8
    assert (consumer.stats.parked, consumer.stats.retries) == (10, 14)


async def test_a_batch_goes_on_as_a_batch_behind_the_record_that_failed(
    kafka: EmbeddedKafka, bus_env: str, producer: BusProducer, db: Database
) -> None:
    # Given three refused records spread among thirty good ones, fetched as one batch
    gate, hooks = Gate(IllegalTransitionError("incident", "resolved", "firing")), test_bus.Hooks()
    sent = [envelope(stuck=n in (0, 12, 25)) for n in range(33)]
    await publish_at_once(producer, bus_env, sent)
    consumer = parking_runner(bus_env, kafka, producer, gate, db, batch_hooks=hooks, settings=BATCHED)

    async with running(consumer):
        await eventually(lambda: consumer.stats.processed == 30 and consumer.stats.dead_lettered == 3)

    # Then each refused record went alone and the good ones around it in batches: a handful of
    # transactions (one by one would be 33), every good record applied once
    transactions = sum(1 for call, _ in hooks.calls if call == "start")
    assert transactions <= 12, hooks.calls
    assert sorted(await applied(db)) == sorted(e.message_id for e in sent if not e.payload["stuck"])
    # (a refused record was tried twice: in the batch that rolled back, then alone, dead-lettered)
    assert [gate.tries[e.message_id] for e in sent if e.payload["stuck"]] == [2, 2, 2]


class RefusingFlush(test_bus.Hooks):
    """Batch hooks whose flush refuses any batch holding a ``stuck`` record (as triage's flush
    meets a value the database refuses): the failing record is not known, only its batch."""

    async def start(self, conn: AsyncConnection, envelopes: Sequence[Envelope]) -> None:
        await super().start(conn, envelopes)
        self.refuse_finish = any(e.payload.get("stuck") for e in envelopes)

    async def finish(self, conn: AsyncConnection) -> None:
        self.calls.append(("finish", []))
        if self.refuse_finish:
            raise IllegalTransitionError("incident", "resolved", "firing")


async def test_a_batch_whose_flush_fails_is_split_until_the_bad_record_is_alone(
    kafka: EmbeddedKafka, bus_env: str, producer: BusProducer, db: Database
) -> None:
    hooks, sent = RefusingFlush(), [envelope(stuck=n == 40) for n in range(64)]
    await publish_at_once(producer, bus_env, sent)
    consumer = parking_runner(bus_env, kafka, producer, recording_handler, db, batch_hooks=hooks, settings=BATCHED)

    async with running(consumer):
        await eventually(lambda: consumer.stats.processed == 63 and consumer.stats.dead_lettered == 1)

    # halves of 64, 32, 16, 8, 4, 2, 1 around the bad record: about 2 x log2(64) transactions, not 64
    assert sum(1 for call, _ in hooks.calls if call == "start") <= 16, hooks.calls
    assert sorted(await applied(db)) == sorted(e.message_id for e in sent if not e.payload["stuck"])


@BOTH
async def test_a_permanent_failure_is_dead_lettered_after_one_try_with_its_reason(
    kafka: EmbeddedKafka, bus_env: str, producer: BusProducer, db: Database
) -> None:
    gate = Gate(IllegalTransitionError("incident", "resolved", "firing"))
    consumer, refused, good = await refuse_one(bus_env, kafka, producer, gate, db, stuck=True)

    assert gate.tries[refused.message_id] == 1 and consumer.stats.retries == 0
    assert await applied(db) == [good.message_id]
    [letter] = [DeadLetter.model_validate_json(r.value) for r in
                await read_topic(kafka, topic_name(Topic.DLQ, bus_env), 1)]
    assert (letter.original_message_id, letter.error_code, letter.reason) == (
        refused.message_id, "illegal_transition", "incident cannot move from resolved to firing")
    assert await rows(db) == [(refused.message_id, ParkedState.DEAD_LETTERED, 1, "illegal_transition")]


@pytest.mark.postgres
@pytest.mark.parametrize("db", ["postgresql"], indirect=True)  # SQLite holds any length, and a NUL
@pytest.mark.parametrize("value", ["x" * 65, "nul\x00byte"], ids=["too_long", "nul"])
async def test_a_value_postgresql_refuses_is_dead_lettered_after_one_try(
    kafka: EmbeddedKafka, bus_env: str, producer: BusProducer, db: Database, value: str
) -> None:
    # Given a handler writing a value its column cannot hold (asyncpg raises a bare DBAPIError)
    tries = []

    async def store_value(conn: AsyncConnection, env: Envelope, meta: RecordMeta) -> None:
        tries.append(env.message_id)
        await conn.execute(insert(test_bus.effects).values(message_id=env.payload.get("value", env.message_id)))

    consumer, refused, _ = await refuse_one(bus_env, kafka, producer, store_value, db, value=value)

    assert tries.count(refused.message_id) == 1 and consumer.stats.parked == 0
    assert await rows(db) == [(refused.message_id, ParkedState.DEAD_LETTERED, 1, "invalid_data")]


async def test_an_unexpected_failure_is_dead_lettered_at_its_last_try_without_holding_the_partition(
    kafka: EmbeddedKafka, bus_env: str, producer: BusProducer, db: Database
) -> None:
    topic = topic_name(Topic.ALERTS, bus_env)
    gate = Gate(KeyError("a bug"))
    bug, good = envelope(stuck=True), envelope()
    for env in (bug, good):
        await producer.publish(topic, KEY, env)
    consumer = parking_runner(bus_env, kafka, producer, gate, db,
                              settings=replace(PARKING, max_unexpected_attempts=6))

    async with running(consumer):
        await eventually(lambda: consumer.stats.dead_lettered == 1, timeout=20)

    assert consumer.stats.parked == 1 and await applied(db) == [good.message_id]
    assert gate.tries[bug.message_id] == 6  # tried in place, then from the store, then refused
    assert await rows(db) == [(bug.message_id, ParkedState.DEAD_LETTERED, 1, "unhandled_error")]


async def test_a_record_parked_by_a_stopped_consumer_is_applied_by_the_next_one(
    kafka: EmbeddedKafka, bus_env: str, producer: BusProducer, db: Database
) -> None:
    # Given a record parked, and the consumer that parked it gone
    gate = Gate(ConcurrentUpdateError("busy"))
    stuck = envelope(stuck=True)
    await producer.publish(topic_name(Topic.ALERTS, bus_env), KEY, stuck)
    first = parking_runner(bus_env, kafka, producer, gate, db, settings=replace(PARKING, park_poll=NO_REDRIVE))
    async with running(first):
        await eventually(lambda: first.stats.parked == 1)

    # When the failure clears and another member of the consumer starts (with nothing on its topic)
    gate.released.set()
    second = parking_runner(bus_env, kafka, producer, gate, db, topic=Topic.RUN_EVENTS)
    async with running(second):
        await eventually(lambda: second.stats.processed == 1, timeout=15)

    # Then the record is applied from the store, once
    assert await applied(db) == [stuck.message_id] and await rows(db) == []


def test_the_park_of_a_consumer_reaches_metrics() -> None:
    metrics = Metrics()
    set_park(metrics, "coordinator-decisions",
             ParkSummary(parked=2, oldest_parked_age=timedelta(seconds=42), dead_lettered=3))
    shown = metrics.render().decode()
    assert 'ira_parked_messages{consumer="coordinator-decisions"} 2.0' in shown
    assert 'ira_parked_oldest_age_seconds{consumer="coordinator-decisions"} 42.0' in shown
    assert 'ira_dead_letters{consumer="coordinator-decisions"} 3.0' in shown


@pytest.mark.postgres
@pytest.mark.parametrize("db", ["postgresql"], indirect=True)
async def test_a_connection_cut_under_a_record_is_retried_and_applied_once(
    kafka: EmbeddedKafka, bus_env: str, producer: BusProducer, db: Database
) -> None:
    # Given a handler whose database connection is terminated by PostgreSQL while it applies
    # one record (pg_terminate_backend: what a failover or a restart does to open sessions)
    cut: list[int] = []

    async def cut_once(conn: AsyncConnection, env: Envelope, meta: RecordMeta) -> None:
        if env.payload.get("stuck") and not cut:
            cut.append((await conn.execute(text("SELECT pg_backend_pid()"))).scalar_one())
            killer = await asyncpg.connect(postgres_test_url())
            try:
                await killer.execute("SELECT pg_terminate_backend($1)", cut[0])
            finally:
                await killer.close()
        await recording_handler(conn, env, meta)

    sent = [envelope(stuck=n == 1) for n in range(4)]
    for env in sent:
        await producer.publish(topic_name(Topic.ALERTS, bus_env), KEY, env)
    consumer = parking_runner(bus_env, kafka, producer, cut_once, db,
                              settings=replace(PARKING, max_unexpected_attempts=1))  # a bug: the DLQ at once

    async with running(consumer):
        await eventually(lambda: consumer.stats.processed == 4, timeout=20)

    # Then the lost connection counts as transient: the record is tried again on a new
    # connection, and every record is applied once
    assert cut and consumer.stats.retries >= 1 and consumer.stats.dead_lettered == 0
    assert await applied(db) == [e.message_id for e in sent]


@BOTH
async def test_a_poll_that_finds_nothing_due_reads_the_park_in_the_same_reader(db: Database) -> None:
    """Every consumer polls its park every ``park_poll``; most polls find nothing due, and the
    park's summary (for /metrics) comes from the reader that looked."""
    clock = SystemClock()
    async with db.transaction() as conn:  # parked, due only in an hour
        await park_store.park(conn, ParkedRecord(
            tenant_id="acme", consumer=CONSUMER, message_id="m-1", topic="t", partition=0, offset=7, timestamp_ms=0,
            key=None, value=b"v", headers={}, attempts=1, error_code="transient", reason="busy"),
            at=clock.now(), due_at=clock.now() + timedelta(hours=1))
    readers = count_opened(db, "reader")
    summaries: list[ParkSummary] = []
    tried: list[object] = []

    async def attempt(raw: object, meta: RecordMeta, attempts: int) -> None:
        tried.append(raw)

    lot = ParkingLot(db, consumer=CONSUMER, clock=clock, lease=timedelta(seconds=30),
                     poll=timedelta(milliseconds=20), backoff=lambda _exc, _n: timedelta(seconds=1))
    stop = asyncio.Event()
    task = asyncio.create_task(lot.run(stop, attempt, on_summary=summaries.append))  # type: ignore[arg-type]
    try:
        await eventually(lambda: len(summaries) >= 3)
    finally:
        stop.set()
        await asyncio.wait_for(task, 10)
    assert tried == []
    assert {(s.parked, s.dead_lettered) for s in summaries} == {(1, 0)}
    assert len(readers) == len(summaries)  # one reader per poll, not one to look and one to summarize
