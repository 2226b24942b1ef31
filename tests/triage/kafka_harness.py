"""Triage consumers, the relay and topic reads on the session's embedded broker."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import replace
from datetime import timedelta

from aiokafka import AIOKafkaConsumer, ConsumerRecord, TopicPartition

from ira.core.alert import AlertEvent, ChangeEvent
from ira.core.clock import SystemClock
from ira.core.envelope import Topic, topic_name
from ira.infra.tansu import EmbeddedKafka
from ira.runtime.bus.consumer import ConsumerRunner, ConsumerSettings
from ira.runtime.bus.producer import BusProducer
from ira.runtime.relay import OutboxRelay
from ira.runtime.store.database import Database
from ira.triage.main import CONSUMER
from ira.triage.worker import TriageHandler
from tests.triage.builders import envelope, key

FAST = ConsumerSettings(session_timeout=timedelta(seconds=2), fetch_wait=timedelta(milliseconds=100),
                        retry_backoff=timedelta(milliseconds=10))


def triage_consumer(
    kafka: EmbeddedKafka, bus_env: str, *, producer: BusProducer, db: Database, handler: TriageHandler,
    group_id: str | None = None, batch_size: int = 1,
) -> ConsumerRunner:
    """The triage consumer as the role builds it, in a consumer group of this test's own."""
    return ConsumerRunner(
        bootstrap=kafka.bootstrap, group_id=group_id or f"ira-triage-{uuid.uuid4().hex[:8]}", name=CONSUMER,
        topics=[topic_name(Topic.ALERTS, bus_env)], handler=handler, producer=producer,
        dlq_topic=topic_name(Topic.DLQ, bus_env), db=db, batch_hooks=handler,
        settings=replace(FAST, batch_size=batch_size))


@asynccontextmanager
async def running(*workers: ConsumerRunner | OutboxRelay) -> AsyncIterator[asyncio.Event]:
    """Run consumers (and relays) in the background; on exit stop them and wait until they left."""
    stop = asyncio.Event()
    tasks = [asyncio.create_task(w.run(stop)) for w in workers]
    try:
        yield stop
    finally:
        stop.set()
        await asyncio.wait_for(asyncio.gather(*tasks), 20)


def relay(db: Database, producer: BusProducer) -> OutboxRelay:
    return OutboxRelay(db=db, publisher=producer, clock=SystemClock(), poll_interval=timedelta(milliseconds=50))


async def publish(producer: BusProducer, bus_env: str, events: Sequence[AlertEvent | ChangeEvent]) -> None:
    """Exactly what the sources role sends: one envelope per event, keyed tenant:fingerprint."""
    topic = topic_name(Topic.ALERTS, bus_env)
    for event in events:
        await producer.publish(topic, key(event), envelope(event))


async def read_topic(kafka: EmbeddedKafka, topic: str, count: int, *, timeout: float = 15
                     ) -> list[ConsumerRecord[bytes, bytes]]:
    """The first ``count`` records of ``topic`` (all partitions, offset order within each)."""
    reader = AIOKafkaConsumer(bootstrap_servers=kafka.bootstrap, enable_auto_commit=False)
    await reader.start()
    try:
        reader.assign([TopicPartition(topic, p) for p in reader.partitions_for_topic(topic) or ()])
        await reader.seek_to_beginning()
        records: list[ConsumerRecord[bytes, bytes]] = []
        deadline = time.monotonic() + timeout
        while len(records) < count and time.monotonic() < deadline:
            for batch in (await reader.getmany(timeout_ms=200)).values():
                records.extend(batch)
        return records
    finally:
        await reader.stop()
