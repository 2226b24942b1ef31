"""Triage as a Kafka consumer on the embedded broker: ordering, replays, scale-out, poison.

Events are published exactly as the sources role publishes them; decisions are read back
from ``ira.incidents.v1`` after the real outbox relay sent them.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from sqlalchemy import func, select

from ira.core.clock import Clock, FrozenClock, SystemClock
from ira.core.decision import IncidentDecision, IncidentUpdate
from ira.core.envelope import DeadLetter, Envelope, Topic, topic_name
from ira.infra.tansu import EmbeddedKafka
from ira.runtime.bus.consumer import ConsumerRunner
from ira.runtime.bus.producer import BusProducer
from ira.runtime.settings.triage import NoiseSettings, TriageSettings
from ira.runtime.store.database import Database
from ira.runtime.store.schema import outbox
from ira.triage.worker import TriageHandler
from tests.eventually import eventually
from tests.triage.builders import T0, alert, envelope, key, resolved
from tests.triage.harness import evaluations, handler, incident_rows, minutes, start_run
from tests.triage.kafka_harness import publish, read_topic, relay, running, triage_consumer


def triage_for(bus_env: str, settings: TriageSettings | None = None, clock: Clock | None = None) -> TriageHandler:
    return handler(clock or FrozenClock(T0), settings, environment=bus_env)


Build = Callable[..., ConsumerRunner]


@pytest.fixture
def consumer_for(kafka: EmbeddedKafka, bus_env: str, producer: BusProducer) -> Build:
    """A triage consumer of this test's topics over ``db`` (options: group_id, batch_size)."""

    def build(db: Database, *, settings: TriageSettings | None = None, clock: Clock | None = None,
              **options: Any) -> ConsumerRunner:
        return triage_consumer(kafka, bus_env, producer=producer, db=db,
                               handler=triage_for(bus_env, settings, clock), **options)

    return build


async def count(db: Database, table) -> int:  # type: ignore[no-untyped-def]
    async with db.reader() as conn:
        return (await conn.execute(select(func.count()).select_from(table))).scalar_one()


async def decisions_on_topic(kafka: EmbeddedKafka, bus_env: str, expected: int, topic: Topic = Topic.INCIDENTS,
                            ) -> list[IncidentDecision]:
    """Run requests are on ``ira.incidents.v1``; follow-ups (deliver) on ``ira.incident-updates.v1``."""
    records = await read_topic(kafka, topic_name(topic, bus_env), expected)
    return [IncidentDecision.model_validate(Envelope.from_bytes(r.value).payload) for r in records]


UPDATES = Topic.INCIDENT_UPDATES


async def test_a_resolved_alert_reaches_the_waiting_runs_subscription(
    kafka: EmbeddedKafka, bus_env: str, producer: BusProducer, sqlite_db: Database, consumer_for: Build
) -> None:
    consumer = consumer_for(sqlite_db)
    async with running(consumer, relay(sqlite_db, producer)):
        await publish(producer, bus_env, [alert(fingerprint="fp-1")])
        [opened] = await eventually(lambda: decisions_on_topic(kafka, bus_env, 1))
        run_id = await start_run(sqlite_db, opened.incident_id)  # the coordinator's C1, simulated
        await publish(producer, bus_env, [resolved(fingerprint="fp-1", at=T0 + minutes(2))])
        [update] = await eventually(lambda: _at_least(updates_on_topic(kafka, bus_env, 1), 1))

    # the follow-up is an update on its own topic: a storm of them never stands before a new run request
    assert opened.decision == "create_run"
    assert (update.incident_id, update.run_id, update.seq) == (opened.incident_id, run_id, 1)
    assert (update.trigger, update.changes.resolved, update.changes.incident_version) == ("all_resolved", 1, 2)


async def updates_on_topic(kafka: EmbeddedKafka, bus_env: str, expected: int) -> list[IncidentUpdate]:
    records = await read_topic(kafka, topic_name(UPDATES, bus_env), expected)
    return [IncidentUpdate.model_validate(Envelope.from_bytes(r.value).payload) for r in records]


async def _all_relayed(db: Database) -> bool:
    async with db.reader() as conn:
        return not (await conn.execute(select(func.count()).select_from(outbox).where(outbox.c.sent_at.is_(None)))
                    ).scalar_one()


async def _at_least(found, n: int):  # type: ignore[no-untyped-def]
    items = await found
    return items if len(items) >= n else None


async def test_updates_keep_each_incidents_order(
    kafka: EmbeddedKafka, bus_env: str, producer: BusProducer, sqlite_db: Database, consumer_for: Build
) -> None:
    # a fold is due a millisecond after the last update (the real clock moves), no flapping limit:
    # about as many updates as batches
    settings = TriageSettings(update_interval=timedelta(milliseconds=1), noise=NoiseSettings(flapping_transitions=100))
    consumer = consumer_for(sqlite_db, batch_size=3, settings=settings, clock=SystemClock())
    first = [alert(fingerprint="fp-a"), alert(fingerprint="fp-b", service="payments")]
    flips = [(resolved if i % 2 == 0 else alert)(fingerprint=fp, service=svc, at=T0 + minutes(i + 1))
             for i in range(10) for fp, svc in (("fp-a", "checkout"), ("fp-b", "payments"))]
    async with running(consumer, relay(sqlite_db, producer)):
        await publish(producer, bus_env, first)
        opened = await eventually(lambda: _at_least(decisions_on_topic(kafka, bus_env, 2), 2))
        for decision in opened:
            await start_run(sqlite_db, decision.incident_id)
        await publish(producer, bus_env, flips)
        await eventually(lambda: consumer.stats.processed == 22, timeout=20)
        await eventually(lambda: _all_relayed(sqlite_db), timeout=20)  # the last batch's update too
        sent = await eventually(lambda: _at_least(updates_on_topic(kafka, bus_env, 4), 4), timeout=20)

    for decision in opened:  # an incident's updates arrive in order, each alert event counted once
        mine = [u for u in sent if u.incident_id == decision.incident_id]
        assert [u.seq for u in mine] == list(range(1, len(mine) + 1)) and len(mine) >= 2
        versions = [u.changes.incident_version for u in mine]
        assert versions == sorted(versions) and versions[-1] == 11
        assert sum(u.changes.events for u in mine) == 10


async def test_reconsumed_events_create_no_second_incident_or_decision(
    kafka: EmbeddedKafka, bus_env: str, producer: BusProducer, sqlite_db: Database, consumer_for: Build
) -> None:
    events = [alert(fingerprint="fp-1"), alert(fingerprint="fp-2"), alert(fingerprint="fp-3", service="payments"),
              resolved(fingerprint="fp-1", at=T0 + minutes(1))]
    await publish(producer, bus_env, events)
    first = consumer_for(sqlite_db)
    async with running(first):
        await eventually(lambda: first.stats.processed == 4)
    incidents, evaluated = await incident_rows(sqlite_db), await evaluations(sqlite_db)

    # a second consumer group reads the topic from offset 0 (an offset reset), and a sender
    # retries one alert under a new event id: the inbox and the source identity catch both
    replay = consumer_for(sqlite_db, batch_size=10)
    retried = events[1].model_copy(update={"event_id": "retried-event-id"})
    await publish(producer, bus_env, [retried])
    async with running(replay):
        await eventually(lambda: replay.stats.duplicates == 4 and replay.stats.processed == 1)

    assert await incident_rows(sqlite_db) == incidents and await count(sqlite_db, outbox) == 2
    [late] = [e for e in await evaluations(sqlite_db) if e not in evaluated]
    assert (late["event_id"], late["reason"], late["basis"]["first_event_id"]) == (
        "retried-event-id", "duplicate", events[1].event_id)


async def test_two_workers_split_the_partitions_and_still_make_one_incident_per_group(
    kafka: EmbeddedKafka, bus_env: str, producer: BusProducer, db: Database, consumer_for: Build
) -> None:
    group_id = f"ira-triage-shared-{bus_env}"
    workers = [consumer_for(db, group_id=group_id, batch_size=20) for _ in range(2)]
    services = [f"svc-{i}" for i in range(4)]
    events = [alert(fingerprint=f"fp-{s}-{n}", service=s) for n in range(8) for s in services]
    async with running(*workers):
        await eventually(lambda: all(w.lag() for w in workers), timeout=30, message="both workers assigned")
        await publish(producer, bus_env, events)
        await eventually(lambda: sum(w.stats.processed for w in workers) == len(events), timeout=30)

    incidents = await incident_rows(db)
    assert all(w.stats.processed > 0 for w in workers)
    assert sorted(i["service"] for i in incidents) == services
    assert {(i["version"], i["firing_count"]) for i in incidents} == {(8, 8)}
    reasons = [e["reason"] for e in await evaluations(db)]
    assert reasons.count("new_incident") == 4 and reasons.count("cooldown") == 28


async def test_poison_goes_to_the_dlq_and_the_partition_keeps_flowing(
    kafka: EmbeddedKafka, bus_env: str, producer: BusProducer, sqlite_db: Database, consumer_for: Build
) -> None:
    topic, good = topic_name(Topic.ALERTS, bus_env), alert()
    bad_type = envelope(alert(fingerprint="fp-x")).model_copy(update={"type": "alert.exploded"})
    bad_payload = envelope(alert(fingerprint="fp-y")).model_copy(update={"payload": {"status": "firing"}})
    await producer.publish_raw(topic, key(good), b"{not json", {})
    await producer.publish(topic, key(good), bad_type)
    await producer.publish(topic, key(good), bad_payload)
    await publish(producer, bus_env, [good])
    consumer = consumer_for(sqlite_db, batch_size=10)
    async with running(consumer):
        await eventually(lambda: consumer.stats.dead_lettered == 3 and consumer.stats.processed == 1)

    letters = [DeadLetter.model_validate_json(r.value)
               for r in await read_topic(kafka, topic_name(Topic.DLQ, bus_env), 3)]
    assert {(d.consumer, d.error_code) for d in letters} == {("triage", "invalid_message")}
    assert any("alert.exploded" in d.reason for d in letters)
    assert [e["event_id"] for e in await evaluations(sqlite_db)] == [good.event_id]
