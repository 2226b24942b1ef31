"""The Kafka bus against the real embedded broker (Tansu) and a real SQLite database.

Every test has its own topics (``bus_env``) and consumer group; nothing waits by sleeping.
"""

from __future__ import annotations

import asyncio
import socket
import time
import uuid
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager, nullcontext
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from aiokafka import AIOKafkaConsumer, ConsumerRecord, TopicPartition
from aiokafka.consumer import fetcher as fetcher_module
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import Tracer
from sqlalchemy import Column, Integer, MetaData, String, Table, insert, select
from sqlalchemy.exc import DataError, DBAPIError, OperationalError, PendingRollbackError
from sqlalchemy.ext.asyncio import AsyncConnection

from ira.core.clock import SystemClock
from ira.core.commit import OutboxMessage
from ira.core.envelope import DeadLetter, Envelope, Topic, topic_name
from ira.core.errors import (
    BrokerUnavailableError,
    ConcurrentUpdateError,
    DuplicateMessageError,
    IllegalTransitionError,
    InvalidMessageError,
    StaleEpochError,
)
from ira.core.ids import new_event_id
from ira.infra.tansu import BrokerStartError, EmbeddedKafka
from ira.runtime.bus import tracing
from ira.runtime.bus.admin import ensure_topics, missing_topics, topic_names, topics_exist
from ira.runtime.bus.consumer import ConsumerRunner, ConsumerSettings
from ira.runtime.bus.inbox import InboxApplier, record_inbox_many
from ira.runtime.bus.producer import BusProducer, Published
from ira.runtime.bus.record import Disposition, InboxHandler, Outcome, PlainHandler, RecordMeta, disposition
from ira.runtime.bus.together import TogetherPublisher
from ira.runtime.settings import load_settings
from ira.runtime.store.database import Database, is_reader
from ira.runtime.store.outbox import URGENT_HEADER, envelope_headers
from ira.runtime.store.schema import inbox
from ira.runtime.telemetry import setup_tracing
from tests.eventually import eventually
from tests.kafka_fixtures import unique_environment
from tests.store_fixtures import _drop_schema, open_database, postgres_test_url

KEY = "acme:fp-1"
CONSUMER = "bus-test"
META = RecordMeta(topic="t", partition=0, offset=0, key=None, headers={}, timestamp_ms=0)
FAST = ConsumerSettings(session_timeout=timedelta(seconds=2), fetch_wait=timedelta(milliseconds=100),
                        retry_backoff=timedelta(milliseconds=10), max_hold=timedelta(hours=1))
"""Never parks (tests/runtime/test_park.py does): these tests are about a record retried in place."""

effects_metadata = MetaData()
effects = Table(
    "bus_test_effects", effects_metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("message_id", String(64), nullable=False),  # not unique: a double apply would show
)


@pytest.fixture
async def db(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Database]:
    """A migrated SQLite database (or PostgreSQL schema, by indirect parameter) with the effects table."""
    database, schema = await open_database(getattr(request, "param", "sqlite"), tmp_path)
    async with database.transaction() as conn:
        await conn.run_sync(effects_metadata.create_all)
    yield database
    await database.close()
    if schema:
        await _drop_schema(postgres_test_url(), schema)


@pytest.fixture
async def producer(kafka: EmbeddedKafka) -> AsyncIterator[BusProducer]:
    async with BusProducer(kafka.bootstrap, request_timeout=timedelta(seconds=2)) as bus_producer:
        yield bus_producer


def envelope(**payload: object) -> Envelope:
    return Envelope(message_id=new_event_id(), type="test.event", tenant_id="acme",
                    occurred_at=datetime.now(UTC), payload=payload)


def runner(
    bus_env: str, kafka: EmbeddedKafka, producer: BusProducer, handler: InboxHandler | PlainHandler, *,
    db: Database | None = None, batch_size: int = 1, tracer: Tracer | None = None, group_id: str | None = None,
) -> ConsumerRunner:
    """A consumer of this test's alerts topic, in a consumer group of its own (or ``group_id``)."""
    return ConsumerRunner(
        bootstrap=kafka.bootstrap, group_id=group_id or f"g-{uuid.uuid4().hex[:8]}", name=CONSUMER, handler=handler,
        topics=[topic_name(Topic.ALERTS, bus_env)], producer=producer, dlq_topic=topic_name(Topic.DLQ, bus_env),
        db=db, inbox=db is not None, settings=replace(FAST, batch_size=batch_size), tracer=tracer,
    )


@asynccontextmanager
async def running(consumer: ConsumerRunner) -> AsyncIterator[asyncio.Event]:
    """Run the consumer in the background; on exit stop it and wait until it left its group."""
    stop = asyncio.Event()
    task = asyncio.create_task(consumer.run(stop))
    try:
        yield stop
    finally:
        stop.set()
        await asyncio.wait_for(task, 15)


async def recording_handler(conn: AsyncConnection, env: Envelope, meta: RecordMeta) -> None:
    """Writes the effect first, so a refusal after it proves the transaction rolled back."""
    await conn.execute(insert(effects).values(message_id=env.message_id))
    if env.payload.get("refuse"):
        raise IllegalTransitionError("incident", "resolved", "firing")


async def applied(db: Database) -> list[str]:
    async with db.reader() as conn:
        return list((await conn.execute(select(effects.c.message_id).order_by(effects.c.id))).scalars())


async def inbox_ids(db: Database) -> set[str]:
    async with db.reader() as conn:
        return set((await conn.execute(select(inbox.c.message_id).where(inbox.c.consumer == CONSUMER))).scalars())


async def read_topic(kafka: EmbeddedKafka, topic: str, count: int) -> list[ConsumerRecord[bytes, bytes]]:
    """The first ``count`` records of ``topic`` (all partitions), without a consumer group."""
    reader = AIOKafkaConsumer(bootstrap_servers=kafka.bootstrap, enable_auto_commit=False)
    await reader.start()
    try:
        reader.assign([TopicPartition(topic, p) for p in reader.partitions_for_topic(topic) or ()])
        await reader.seek_to_beginning()
        records: list[ConsumerRecord[bytes, bytes]] = []
        deadline = time.monotonic() + 10
        while len(records) < count and time.monotonic() < deadline:
            for batch in (await reader.getmany(timeout_ms=200)).values():
                records.extend(batch)
        return records
    finally:
        await reader.stop()


async def committed_offset(kafka: EmbeddedKafka, group_id: str, tp: TopicPartition) -> int | None:
    """What ``group_id`` committed for ``tp``, read without joining the group."""
    reader = AIOKafkaConsumer(bootstrap_servers=kafka.bootstrap, group_id=group_id, enable_auto_commit=False)
    await reader.start()
    try:
        reader.assign([tp])
        return await reader.committed(tp)
    finally:
        await reader.stop()


# --- topics -------------------------------------------------------------------------------


async def test_ensure_topics_is_idempotent_and_prefixes_staging(kafka: EmbeddedKafka) -> None:
    first = await ensure_topics(kafka.bootstrap, "staging")
    again = await ensure_topics(kafka.bootstrap, "staging")

    assert first == again == [f"staging.{t.value}" for t in Topic]
    assert await topics_exist(kafka.bootstrap, "staging")
    assert topic_names("prod") == [t.value for t in Topic]


async def test_checking_topics_never_creates_them(kafka: EmbeddedKafka) -> None:
    fresh = unique_environment()

    assert await missing_topics(kafka.bootstrap, fresh) == topic_names(fresh)
    assert await missing_topics(kafka.bootstrap, fresh) == topic_names(fresh)  # Tansu auto-creates on describe
    assert not await topics_exist(kafka.bootstrap, fresh)


# --- poison, duplicates, offsets ------------------------------------------------------------


@pytest.mark.parametrize("batch_size", [1, 100])
async def test_poison_goes_to_the_dlq_and_the_partition_keeps_flowing(
    kafka: EmbeddedKafka, bus_env: str, producer: BusProducer, db: Database, batch_size: int
) -> None:
    topic = topic_name(Topic.ALERTS, bus_env)
    refused, good = envelope(refuse=True), envelope()
    sent = [
        await producer.publish_raw(topic, KEY, b"not json", {}),
        await producer.publish_raw(topic, KEY, b'{"message_id": "m-bad", "type": "x"}', {"tenant_id": "acme"}),
        await producer.publish(topic, KEY, refused),
        await producer.publish(topic, KEY, good),
    ]
    consumer = runner(bus_env, kafka, producer, recording_handler, db=db,
                      batch_size=batch_size)

    async with running(consumer):
        await eventually(lambda: consumer.stats.processed == 1 and consumer.stats.dead_lettered == 3)

    assert await applied(db) == [good.message_id]  # the refused handler's write was rolled back
    assert await inbox_ids(db) == {good.message_id}
    letters = [DeadLetter.model_validate_json(r.value) for r in
               await read_topic(kafka, topic_name(Topic.DLQ, bus_env), 3)]
    assert [(d.original_offset, d.error_code, d.original_message_id) for d in letters] == [
        (sent[0].offset, "invalid_message", None),
        (sent[1].offset, "invalid_message", "m-bad"),
        (sent[2].offset, "illegal_transition", refused.message_id),
    ]
    assert letters[0].original_value == "not json" and "tenant_id" in letters[1].reason
    assert {(d.consumer, d.original_topic, d.original_partition) for d in letters} == {
        (CONSUMER, topic, sent[0].partition)}
    tp = TopicPartition(topic, sent[3].partition)
    assert await committed_offset(kafka, consumer.group_id, tp) == sent[3].offset + 1


@pytest.mark.parametrize("db", ["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)], indirect=True)
@pytest.mark.parametrize("batch_size", [1, 100])
async def test_a_duplicate_message_id_is_applied_once(
    kafka: EmbeddedKafka, bus_env: str, producer: BusProducer, db: Database, batch_size: int
) -> None:
    topic = topic_name(Topic.ALERTS, bus_env)
    first, second = envelope(), envelope()
    for env in (first, first, second, first):
        await producer.publish(topic, KEY, env)
    consumer = runner(bus_env, kafka, producer, recording_handler, db=db,
                      batch_size=batch_size)

    async with running(consumer):
        await eventually(lambda: consumer.stats.processed + consumer.stats.duplicates == 4)

    assert await applied(db) == [first.message_id, second.message_id]
    assert (consumer.stats.processed, consumer.stats.duplicates) == (2, 2)


class Hooks:
    """Batch hooks that note what they saw; ``finish`` refuses when told to."""

    def __init__(self, *, refuse_finish: bool = False) -> None:
        self.calls: list[tuple[str, list[str]]] = []
        self.refuse_finish = refuse_finish

    async def start(self, conn: AsyncConnection, envelopes: Sequence[Envelope]) -> None:
        self.calls.append(("start", [e.message_id for e in envelopes]))

    async def finish(self, conn: AsyncConnection) -> None:
        self.calls.append(("finish", []))
        if self.refuse_finish:
            raise ConcurrentUpdateError("the batch's flush lost a race")


async def test_batch_hooks_see_the_new_envelopes_first_and_finish_last(db: Database) -> None:
    hooks, handled = Hooks(), []

    async def handler(conn: AsyncConnection, env: Envelope, meta: RecordMeta) -> None:
        handled.append(env.message_id)
        await recording_handler(conn, env, meta)

    applier = InboxApplier(db, consumer=CONSUMER, handler=handler, clock=SystemClock(),
                           span=lambda env, meta: nullcontext(), hooks=hooks)
    known, first, second = envelope(), envelope(), envelope()
    await applier.apply([(known, META)])
    hooks.calls.clear()

    outcomes = await applier.apply([(first, META), (known, META), (second, META), (first, META)])

    assert outcomes == [Outcome.PROCESSED, Outcome.DUPLICATE, Outcome.PROCESSED, Outcome.DUPLICATE]
    assert hooks.calls == [("start", [first.message_id, second.message_id]), ("finish", [])]
    assert handled[-2:] == [first.message_id, second.message_id]


async def test_a_refusing_finish_rolls_the_whole_batch_back(db: Database) -> None:
    applier = InboxApplier(db, consumer=CONSUMER, handler=recording_handler, clock=SystemClock(),
                           span=lambda env, meta: nullcontext(), hooks=Hooks(refuse_finish=True))

    with pytest.raises(ConcurrentUpdateError):
        await applier.apply([(envelope(), META), (envelope(), META)])

    assert await applied(db) == [] and await inbox_ids(db) == set()


class ReadFirstHooks(Hooks):
    """``ReadFirst`` hooks: the handler only notes what it would write; ``finish`` writes it,
    on the connection the batch was carried to. ``meanwhile`` runs once, after the first read."""

    def __init__(self, db: Database) -> None:
        super().__init__()
        self.db = db
        self.decided: dict[AsyncConnection, list[str]] = {}
        self.on_reader: list[bool] = []
        """Per handler call: was its connection a reader (no write lock)?"""
        self.meanwhile: list[str] = []

    async def handler(self, conn: AsyncConnection, env: Envelope, meta: RecordMeta) -> None:
        self.on_reader.append(is_reader(conn))
        self.decided.setdefault(conn, []).append(env.message_id)

    async def start(self, conn: AsyncConnection, envelopes: Sequence[Envelope]) -> None:
        await super().start(conn, envelopes)
        for message_id in self.meanwhile:  # another applier remembers it between the read and the write
            async with self.db.transaction() as other:
                await record_inbox_many(other, consumer=CONSUMER, keys=[("acme", message_id)], at=datetime.now(UTC))
        self.meanwhile = []

    def carry(self, read: AsyncConnection, write: AsyncConnection) -> None:
        self.calls.append(("carry", []))
        self.decided[write] = self.decided.pop(read, [])

    async def finish(self, conn: AsyncConnection) -> None:
        await super().finish(conn)
        for message_id in self.decided.pop(conn, []):
            await conn.execute(insert(effects).values(message_id=message_id))


def read_first_applier(db: Database, hooks: ReadFirstHooks) -> InboxApplier:
    return InboxApplier(db, consumer=CONSUMER, handler=hooks.handler, clock=SystemClock(),
                        span=lambda env, meta: nullcontext(), hooks=hooks)


async def test_on_sqlite_a_read_first_batch_decides_before_its_write_transaction(db: Database) -> None:
    hooks = ReadFirstHooks(db)
    applier = read_first_applier(db, hooks)
    known, first, second = envelope(), envelope(), envelope()
    await applier.apply([(known, META)])
    hooks.calls.clear()

    outcomes = await applier.apply([(first, META), (known, META), (second, META), (first, META)])

    assert outcomes == [Outcome.PROCESSED, Outcome.DUPLICATE, Outcome.PROCESSED, Outcome.DUPLICATE]
    assert hooks.calls == [("start", [first.message_id, second.message_id]), ("carry", []), ("finish", [])]
    assert hooks.on_reader == [True, True, True]  # decided without SQLite's write lock
    assert await applied(db) == [known.message_id, first.message_id, second.message_id]
    assert await inbox_ids(db) == {known.message_id, first.message_id, second.message_id}


async def test_a_record_remembered_elsewhere_between_read_and_write_sends_the_batch_back_to_its_read(
    db: Database,
) -> None:
    hooks = ReadFirstHooks(db)
    applier = read_first_applier(db, hooks)
    first, second = envelope(), envelope()
    hooks.meanwhile = [second.message_id]  # applied by someone else once this batch has read

    outcomes = await applier.apply([(first, META), (second, META)])

    # the first write found second's inbox row taken and wrote nothing; the second read knew it
    assert outcomes == [Outcome.PROCESSED, Outcome.DUPLICATE]
    assert hooks.calls == [("start", [first.message_id, second.message_id]), ("start", [first.message_id]),
                           ("carry", []), ("finish", [])]
    assert await applied(db) == [first.message_id]
    assert await inbox_ids(db) == {first.message_id, second.message_id}


@pytest.mark.parametrize("db", [pytest.param("postgresql", marks=pytest.mark.postgres)], indirect=True)
async def test_on_postgresql_read_first_hooks_decide_inside_the_write_transaction(db: Database) -> None:
    hooks = ReadFirstHooks(db)
    applier = read_first_applier(db, hooks)
    first = envelope()

    assert await applier.apply([(first, META)]) == [Outcome.PROCESSED]

    assert hooks.calls == [("start", [first.message_id]), ("finish", [])]  # row locks, not one lock: no carry
    assert hooks.on_reader == [False]
    assert await applied(db) == [first.message_id]


async def test_offsets_are_committed_only_after_the_handler_and_stop_finishes_the_record(
    kafka: EmbeddedKafka, bus_env: str, producer: BusProducer, db: Database
) -> None:
    topic = topic_name(Topic.ALERTS, bus_env)
    entered, release = asyncio.Event(), asyncio.Event()

    async def gated(conn: AsyncConnection, env: Envelope, meta: RecordMeta) -> None:
        if env.payload.get("gate"):
            entered.set()
            await asyncio.wait_for(release.wait(), 10)
        await recording_handler(conn, env, meta)

    m1, m2, m3 = envelope(), envelope(gate=True), envelope()
    sent = [await producer.publish(topic, KEY, env) for env in (m1, m2, m3)]
    tp = TopicPartition(topic, sent[0].partition)
    consumer = runner(bus_env, kafka, producer, gated, db=db)

    async with running(consumer) as stop:
        await eventually(entered.is_set)
        assert await applied(db) == [m1.message_id]
        committed = await committed_offset(kafka, consumer.group_id, tp)
        assert committed is None or committed <= sent[1].offset  # never past the open transaction
        stop.set()  # while m2's handler is still running
        release.set()

    assert await applied(db) == [m1.message_id, m2.message_id]  # m2 finished, m3 never started
    assert await committed_offset(kafka, consumer.group_id, tp) == sent[1].offset + 1


# In a batch the first failure rolls the batch back (not a retry); then it goes one by one.
@pytest.mark.parametrize(("batch_size", "retries"), [(1, 2), (100, 1)])
async def test_transient_errors_retry_the_same_record_in_order(
    kafka: EmbeddedKafka, bus_env: str, producer: BusProducer, db: Database, batch_size: int, retries: int
) -> None:
    topic = topic_name(Topic.ALERTS, bus_env)
    failures = {"left": 2}

    async def flaky(conn: AsyncConnection, env: Envelope, meta: RecordMeta) -> None:
        if env.payload.get("flaky") and failures["left"]:
            failures["left"] -= 1
            raise ConcurrentUpdateError("run r1 moved on")
        await recording_handler(conn, env, meta)

    m1, m2 = envelope(flaky=True), envelope()
    for env in (m1, m2):
        await producer.publish(topic, KEY, env)
    consumer = runner(bus_env, kafka, producer, flaky, db=db,
                      batch_size=batch_size)

    async with running(consumer):
        await eventually(lambda: consumer.stats.processed == 2)

    assert await applied(db) == [m1.message_id, m2.message_id]
    assert (failures["left"], consumer.stats.retries, consumer.stats.dead_lettered) == (0, retries, 0)


async def test_a_record_failing_transiently_is_never_committed_past_within_max_hold(
    kafka: EmbeddedKafka, bus_env: str, producer: BusProducer, db: Database
) -> None:
    topic = topic_name(Topic.ALERTS, bus_env)

    async def unavailable(conn: AsyncConnection, env: Envelope, meta: RecordMeta) -> None:
        if env.payload.get("stuck"):
            raise ConcurrentUpdateError("still busy")
        await recording_handler(conn, env, meta)

    sent = [await producer.publish(topic, KEY, env) for env in (envelope(stuck=True), envelope())]
    consumer = runner(bus_env, kafka, producer, unavailable, db=db)

    async with running(consumer):
        await eventually(lambda: consumer.stats.retries >= 3)

    assert await applied(db) == []  # the record behind it waits too: order is kept
    tp = TopicPartition(topic, sent[0].partition)
    assert await committed_offset(kafka, consumer.group_id, tp) is None


# --- an idle consumer -------------------------------------------------------------------------


async def test_an_idle_consumer_comes_round_per_idle_wake_not_per_fetch(
    kafka: EmbeddedKafka, bus_env: str, producer: BusProducer
) -> None:
    """A short fetch wait (the run requests' 20 ms) is for the embedded broker, which answers a
    fetch only when its wait ends: the consumer's own loop (its gauges, its bookkeeping) need not
    come round with every empty fetch, and a record still wakes it as soon as a fetch brings it."""
    rounds: list[float] = []
    handled: list[str] = []

    async def handle(env: Envelope, meta: RecordMeta) -> None:
        handled.append(env.message_id)

    settings = replace(FAST, fetch_wait=timedelta(milliseconds=20), idle_wake=timedelta(milliseconds=500))
    consumer = ConsumerRunner(
        bootstrap=kafka.bootstrap, group_id=f"g-{uuid.uuid4().hex[:8]}", name=CONSUMER, handler=handle,
        topics=[topic_name(Topic.ALERTS, bus_env)], producer=producer, dlq_topic=topic_name(Topic.DLQ, bus_env),
        inbox=False, settings=settings, on_lag=lambda _lags: rounds.append(time.monotonic()))
    async with running(consumer):
        await eventually(lambda: len(rounds) >= 2)  # joined and idle
        first, start = len(rounds), time.monotonic()
        await eventually(lambda: time.monotonic() - start >= 1.5, timeout=5)  # an idle window of 1.5 s
        idle_rounds, window = len(rounds) - first, time.monotonic() - start
        assert idle_rounds <= window / 0.5 + 2, f"{idle_rounds} rounds in {window:.1f} s idle (a fetch is 20 ms)"
        sent = envelope()
        await producer.publish(topic_name(Topic.ALERTS, bus_env), KEY, sent)
        await eventually(lambda: handled == [sent.message_id])
    assert consumer.stats.processed == 1


async def test_a_quiet_consumer_asks_the_broker_at_its_idle_fetch_wait_and_a_record_puts_the_short_one_back(
    kafka: EmbeddedKafka, bus_env: str, producer: BusProducer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The embedded broker answers a fetch when its wait ends: a 20 ms wait is 50 broker round
    trips a second even when nothing comes. Quiet for ``idle_after``, the consumer fetches with
    ``idle_fetch_wait``; the record that ends the quiet is still handled, and the short wait is back."""
    sent_waits: list[int] = []
    request = fetcher_module.FetchRequest

    def counted(max_wait_ms: int, *args: object, **kwargs: object) -> object:
        sent_waits.append(max_wait_ms)
        return request(max_wait_ms, *args, **kwargs)

    monkeypatch.setattr(fetcher_module, "FetchRequest", counted)  # every fetch the consumer sends
    handled: list[str] = []

    async def handle(env: Envelope, meta: RecordMeta) -> None:
        handled.append(env.message_id)

    settings = replace(FAST, fetch_wait=timedelta(milliseconds=20), idle_fetch_wait=timedelta(milliseconds=400),
                       idle_after=timedelta(milliseconds=300))
    consumer = ConsumerRunner(
        bootstrap=kafka.bootstrap, group_id=f"g-{uuid.uuid4().hex[:8]}", name=CONSUMER, handler=handle,
        topics=[topic_name(Topic.ALERTS, bus_env)], producer=producer, dlq_topic=topic_name(Topic.DLQ, bus_env),
        inbox=False, settings=settings)
    async with running(consumer):
        await eventually(lambda: consumer.pace is not None and consumer.pace.idle, timeout=10)  # joined, quiet
        await eventually(lambda: sent_waits[-1:] == [400])
        first, start = len(sent_waits), time.monotonic()
        await eventually(lambda: time.monotonic() - start >= 1.6, timeout=5)  # an idle window of 1.6 s
        idle_fetches = len(sent_waits) - first
        assert 1 <= idle_fetches <= 6, f"{idle_fetches} fetches in 1.6 s idle (at 20 ms: ~80)"
        sent, quiet = envelope(), len(sent_waits)
        await producer.publish(topic_name(Topic.ALERTS, bus_env), KEY, sent)
        await eventually(lambda: handled == [sent.message_id])
        # busy again: fetches with the short wait follow the record (until idle_after passes again,
        # so look at every fetch since, not only the last)
        await eventually(lambda: 20 in sent_waits[quiet:])


# --- tracing, no-inbox mode -----------------------------------------------------------------


def recording_tracer() -> tuple[InMemorySpanExporter, Tracer]:
    """A tracer of the test's own whose finished spans the exporter keeps."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return exporter, provider.get_tracer("test")


async def test_the_handler_runs_in_the_trace_the_record_carries(
    kafka: EmbeddedKafka, bus_env: str, producer: BusProducer
) -> None:
    exporter, tracer = recording_tracer()
    topic = topic_name(Topic.ALERTS, bus_env)
    explicit_trace, explicit_span = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
    from_span, from_header = envelope(), envelope()
    with tracer.start_as_current_span("webhook") as webhook:  # the producer injects the current span
        await producer.publish(topic, KEY, from_span)
    await producer.publish(topic, KEY, from_header,
                           headers={"traceparent": f"00-{explicit_trace}-{explicit_span}-01"})
    seen: dict[str, trace.SpanContext] = {}

    async def handle(env: Envelope, meta: RecordMeta) -> None:
        seen[env.message_id] = trace.get_current_span().get_span_context()

    consumer = runner(bus_env, kafka, producer, handle, tracer=tracer)  # no db: inbox=False
    async with running(consumer):
        await eventually(lambda: len(seen) == 2)

    assert seen[from_span.message_id].trace_id == webhook.get_span_context().trace_id
    assert f"{seen[from_header.message_id].trace_id:032x}" == explicit_trace
    parents = {(s.attributes or {})["messaging.message.id"]: s.parent for s in exporter.get_finished_spans()
               if s.kind is trace.SpanKind.CONSUMER and s.parent is not None}
    assert parents[from_span.message_id].span_id == webhook.get_span_context().span_id
    assert f"{parents[from_header.message_id].span_id:016x}" == explicit_span


async def test_a_publish_is_one_producer_span_and_its_records_continue_it(
    kafka: EmbeddedKafka, bus_env: str
) -> None:
    exporter, tracer = recording_tracer()
    topic = topic_name(Topic.ALERTS, bus_env)
    batch = [envelope(n=n) for n in range(3)]
    async with BusProducer(kafka.bootstrap, tracer=tracer) as traced:
        with tracer.start_as_current_span("webhook") as webhook:
            await traced.publish_many([OutboxMessage(topic=topic, key=KEY, envelope=e) for e in batch])
        seen: dict[str, trace.SpanContext] = {}

        async def handle(env: Envelope, meta: RecordMeta) -> None:
            seen[env.message_id] = trace.get_current_span().get_span_context()

        async with running(runner(bus_env, kafka, traced, handle, tracer=tracer)):
            await eventually(lambda: len(seen) == 3)

    [publish] = [s for s in exporter.get_finished_spans() if s.kind is trace.SpanKind.PRODUCER]
    assert publish.parent is not None and publish.parent.span_id == webhook.get_span_context().span_id
    assert (publish.name, (publish.attributes or {})["messaging.batch.message_count"]) == (f"publish {topic}", 3)
    consumed = [s for s in exporter.get_finished_spans() if s.kind is trace.SpanKind.CONSUMER]
    assert len(consumed) == 3
    assert {s.parent.span_id for s in consumed if s.parent} == {webhook.get_span_context().span_id}
    assert {c.trace_id for c in seen.values()} == {webhook.get_span_context().trace_id}


async def test_without_an_exporter_records_carry_the_trace_their_unrecorded_spans_name(
    kafka: EmbeddedKafka, bus_env: str
) -> None:
    tracer = setup_tracing(load_settings({}), install=False).get_tracer("test")  # no endpoint, no exporter
    topic = topic_name(Topic.ALERTS, bus_env)
    seen: dict[str, tuple[RecordMeta, trace.Span]] = {}
    async with BusProducer(kafka.bootstrap, tracer=tracer) as traced:
        with tracer.start_as_current_span("webhook") as webhook:
            recording = [webhook.is_recording()]  # (a recorded span stops recording once ended: ask inside)
            await traced.publish(topic, KEY, envelope())

        async def handle(env: Envelope, meta: RecordMeta) -> None:
            seen[env.message_id] = (meta, trace.get_current_span())
            recording.append(trace.get_current_span().is_recording())

        async with running(runner(bus_env, kafka, traced, handle, tracer=tracer)):
            await eventually(lambda: len(seen) == 1)

    [(meta, consumed)] = seen.values()
    sent = webhook.get_span_context()
    assert recording == [False, False]  # nothing would see them
    assert sent.is_valid and meta.headers[tracing.TRACEPARENT].split("-")[1] == f"{sent.trace_id:032x}"
    assert consumed.get_span_context().trace_id == sent.trace_id
    assert consumed.get_span_context().span_id not in (0, sent.span_id)  # a span of its own in that trace


async def test_callers_of_one_turn_share_a_pass_and_keep_their_own_trace_and_outcome(
    kafka: EmbeddedKafka, bus_env: str
) -> None:
    exporter, tracer = recording_tracer()
    topic = topic_name(Topic.ALERTS, bus_env)
    sent: dict[str, trace.SpanContext] = {}
    async with BusProducer(kafka.bootstrap, tracer=tracer) as traced:
        together = TogetherPublisher(traced)

        async def request(n: int) -> list[Published]:
            with tracer.start_as_current_span(f"request-{n}") as span:
                env = envelope(n=n)
                sent[env.message_id] = span.get_span_context()
                return await together.publish_many([OutboxMessage(topic=topic, key=KEY, envelope=env)])

        outcomes = await asyncio.gather(*(request(n) for n in range(5)))
        records = await read_topic(kafka, topic, 5)

    assert together.passes == 1 and all(len(o) == 1 for o in outcomes)
    assert len({(o[0].partition, o[0].offset) for o in outcomes}) == 5
    for record in records:  # every record continues its own request's trace
        message_id = Envelope.from_bytes(record.value).message_id
        parent = dict(record.headers)["traceparent"].decode()
        assert parent == tracing.traceparent(sent[message_id])
    [publish] = [s for s in exporter.get_finished_spans() if s.kind is trace.SpanKind.PRODUCER]
    assert {link.context.span_id for link in publish.links} | {publish.parent.span_id} == {
        ctx.span_id for ctx in sent.values()}


async def test_a_pass_that_cannot_reach_the_broker_fails_each_caller(private_kafka: EmbeddedKafka) -> None:
    async with BusProducer(private_kafka.bootstrap, request_timeout=timedelta(milliseconds=500)) as producer:
        together = TogetherPublisher(producer)
        await private_kafka.stop()
        message = OutboxMessage(topic="ira.alerts.v1", key=KEY, envelope=envelope())
        results = await asyncio.gather(*(together.publish_many([message]) for _ in range(3)), return_exceptions=True)

    assert [type(r) for r in results] == [BrokerUnavailableError] * 3


async def test_a_pass_stopped_midway_answers_its_callers(private_kafka: EmbeddedKafka) -> None:
    async with BusProducer(private_kafka.bootstrap, request_timeout=timedelta(seconds=30)) as producer:
        together = TogetherPublisher(producer)
        await private_kafka.stop()  # the pass will wait for acks that do not come
        message = OutboxMessage(topic="ira.alerts.v1", key=KEY, envelope=envelope())
        callers = [asyncio.create_task(together.publish_many([message])) for _ in range(3)]
        [passing] = await eventually(
            lambda: [t for t in asyncio.all_tasks() if t.get_name() == "bus-publish-together"])
        passing.cancel()  # what a stopping process does to its tasks
        results = await asyncio.wait_for(asyncio.gather(*callers, return_exceptions=True), 5)

    assert [str(r) for r in results] == ["publishing stopped"] * 3


# --- broker down, restart, launcher -------------------------------------------------------


async def test_a_stopped_broker_answers_broker_unavailable_quickly(private_kafka: EmbeddedKafka) -> None:
    environment = unique_environment()
    topic = topic_name(Topic.ALERTS, environment)
    await ensure_topics(private_kafka.bootstrap, environment)
    async with BusProducer(private_kafka.bootstrap, request_timeout=timedelta(seconds=1)) as bus_producer:
        await bus_producer.publish(topic, KEY, envelope())
        await private_kafka.stop()

        started = time.monotonic()
        with pytest.raises(BrokerUnavailableError):
            await bus_producer.publish(topic, KEY, envelope())
        assert time.monotonic() - started < 5
        with pytest.raises(BrokerUnavailableError):
            await topics_exist(private_kafka.bootstrap, environment)


async def test_a_restarted_broker_keeps_its_port_but_forgets_its_topics(private_kafka: EmbeddedKafka) -> None:
    environment, bootstrap, first_pid = unique_environment(), private_kafka.bootstrap, private_kafka.pid
    await ensure_topics(bootstrap, environment)

    await private_kafka.kill()
    await private_kafka.start()

    assert (private_kafka.bootstrap, private_kafka.pid != first_pid) == (bootstrap, True)
    assert await missing_topics(bootstrap, environment) == topic_names(environment)
    await ensure_topics(bootstrap, environment)
    assert await topics_exist(bootstrap, environment)


async def test_a_broker_that_cannot_start_says_why(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        broker = EmbeddedKafka(tmp_path, port=taken.getsockname()[1], start_timeout=timedelta(seconds=10))
        with pytest.raises(BrokerStartError, match="tansu"):
            await broker.start()
    assert not broker.is_running()


# --- what a failure means (no broker) -------------------------------------------------------


class Refusal(Exception):
    """What the asyncpg dialect wraps: an error carrying PostgreSQL's SQLSTATE."""

    def __init__(self, sqlstate: str) -> None:
        super().__init__(f"SQLSTATE {sqlstate}")
        self.sqlstate = sqlstate


@pytest.mark.parametrize(("error", "attempt", "expected"), [
    (DuplicateMessageError("seen"), 0, Disposition.DROP_DUPLICATE),
    (StaleEpochError("epoch 3 < 4"), 0, Disposition.DROP_STALE),
    (ConcurrentUpdateError("moved"), 40, Disposition.RETRY),
    (BrokerUnavailableError("down"), 0, Disposition.RETRY),
    (OperationalError("SELECT 1", {}, Exception("database is locked")), 40, Disposition.RETRY),
    (InvalidMessageError("bad"), 0, Disposition.DEAD_LETTER),
    (IllegalTransitionError("run", "completed", "running"), 0, Disposition.DEAD_LETTER),
    (KeyError("bug"), 0, Disposition.RETRY),
    (KeyError("bug"), 4, Disposition.DEAD_LETTER),
    # a value the database refuses (too long, a NUL) is refused again: dead-lettered on the first try
    (DataError("INSERT", {}, Exception("value too long for type character varying(200)")), 0,
     Disposition.DEAD_LETTER),
    # asyncpg's refusals arrive as a bare DBAPIError: the SQLSTATE decides (22: a data exception)
    (DBAPIError("INSERT", {}, Refusal("22001")), 0, Disposition.DEAD_LETTER),
    (DBAPIError("INSERT", {}, Refusal("23505")), 0, Disposition.RETRY),  # a unique race: try again
    # the connection died under the handler: transient whatever the try (test_park cuts a real one)
    (PendingRollbackError("Can't reconnect until invalid transaction is rolled back"), 40, Disposition.RETRY),
    (DBAPIError("INSERT", {}, Exception("closed"), connection_invalidated=True), 40, Disposition.RETRY),
])
def test_the_error_class_decides_what_happens_to_a_record(
    error: BaseException, attempt: int, expected: Disposition
) -> None:
    assert disposition(error, attempt=attempt, max_unexpected_attempts=5) is expected



async def test_urgent_records_of_a_fetch_go_first_unless_their_key_came_earlier(
    kafka: EmbeddedKafka, producer: BusProducer, db: Database
) -> None:
    # Given one partition holding a storm's 20 alerts, then an urgent alert of a new key (a new
    # group's first alert), then an urgent alert whose key already has an alert in the storm
    environment = unique_environment()
    await ensure_topics(kafka.bootstrap, environment, partitions=1)
    topic = topic_name(Topic.ALERTS, environment)
    names = {}
    for name, key, urgent in [*((f"storm{i}", f"acme:fp-{i}", False) for i in range(20)),
                              ("new", "acme:fp-new", True), ("same-key", "acme:fp-3", True)]:
        env = envelope()
        names[env.message_id] = name
        headers = {**envelope_headers(env), **({URGENT_HEADER: "true"} if urgent else {})}
        await producer.publish_raw(topic, key, env.to_bytes(), headers)

    # When a batched consumer reads them (all in its first fetch)
    consumer = runner(environment, kafka, producer, recording_handler, db=db, batch_size=8)
    async with running(consumer):
        await eventually(lambda: consumer.stats.committed.get((topic, 0)) == 22, timeout=20)

    # Then the new key's alert was applied first, the other after its key's earlier alert, each once
    order = [names[message_id] for message_id in await applied(db)]
    assert order[0] == "new"
    assert order.index("same-key") > order.index("storm3")
    assert sorted(order) == sorted(names.values())
