"""A batch of events in one transaction decides exactly like one transaction per event.

The consumer applies up to ``batch_size`` events per transaction and triage writes them at the
end (``finish``), so each event must see the batch's own earlier changes: the incident it
opened or closed, the alert states it moved, the source identities it stored. The same story
is told twice, to two tenants of one database: event by event, and as one batch.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta

import pytest
from redis.asyncio import Redis
from sqlalchemy import select

from ira.core.alert import AlertEvent
from ira.core.clock import FrozenClock
from ira.core.errors import ConcurrentUpdateError
from ira.runtime.settings.triage import TriageSettings
from ira.runtime.store.database import Database
from ira.runtime.store.schema import decisions
from ira.triage.decide import NoiseVerdict
from ira.triage.noise import RedisNoiseState, verdict_key
from ira.triage.tables import incidents
from tests.triage.builders import T0, alert, envelope, resolved
from tests.triage.harness import META, apply, handler, minutes

Step = tuple[timedelta, Callable[[str], AlertEvent]]

STORY: list[Step] = [
    (minutes(0), lambda t: alert(tenant_id=t, fingerprint="fp-1", source_event_id="f1")),
    (minutes(1), lambda t: alert(tenant_id=t, fingerprint="fp-2", at=T0 + minutes(1), source_event_id="f2")),
    (minutes(0), lambda t: alert(tenant_id=t, fingerprint="fp-1", source_event_id="f1")),  # a sender's retry
    (minutes(1), lambda t: resolved(tenant_id=t, fingerprint="fp-1", at=T0 + minutes(2), source_event_id="r1")),
    (minutes(0), lambda t: alert(tenant_id=t, fingerprint="fp-1", at=T0 + minutes(1), source_event_id="late")),
    (minutes(1), lambda t: resolved(tenant_id=t, fingerprint="fp-2", at=T0 + minutes(3), source_event_id="r2")),
    (minutes(10), lambda t: alert(tenant_id=t, fingerprint="fp-1", at=T0 + minutes(13), source_event_id="f1b")),
    (minutes(0), lambda t: alert(tenant_id=t, fingerprint="fp-3", at=T0 + minutes(13), source_event_id="f3")),
    (minutes(30), lambda t: alert(tenant_id=t, fingerprint="fp-4", service="payments", source_event_id="f4")),
    (minutes(0), lambda t: resolved(tenant_id=t, fingerprint="fp-9", source_event_id="r9")),
    (minutes(0), lambda t: alert(tenant_id=t, fingerprint="fp-5", at=T0 + minutes(44), source_event_id="f5")),
]
SETTINGS = TriageSettings(quiet_period=minutes(5), cooldown=minutes(30))


async def one_by_one(db: Database, tenant: str) -> None:
    clock = FrozenClock(T0)
    triage = handler(clock, SETTINGS)
    for delay, make in STORY:
        clock.advance(delay)
        await apply(db, triage, make(tenant))


async def as_one_batch(db: Database, tenant: str) -> None:
    clock = FrozenClock(T0)
    triage = handler(clock, SETTINGS)
    async with db.transaction() as conn:
        for delay, make in STORY:
            clock.advance(delay)
            await triage.triage(conn, make(tenant))
        await triage.finish(conn)


async def as_one_batch_read_first(db: Database, tenant: str) -> None:
    """As the consumer runs a batch: one read for every event up front (``start``), then each event."""
    clock = FrozenClock(T0)
    triage = handler(clock, SETTINGS)
    timed = [(delay, envelope(make(tenant))) for delay, make in STORY]
    async with db.transaction() as conn:
        await triage.start(conn, [env for _, env in timed])
        for delay, env in timed:
            clock.advance(delay)
            await triage(conn, env, META)
        await triage.finish(conn)


async def outcome(db: Database, tenant: str) -> tuple[list, list]:
    async with db.reader() as conn:
        evaluated = (await conn.execute(select(decisions).where(decisions.c.tenant_id == tenant))).all()
        opened = (await conn.execute(select(incidents).where(incidents.c.tenant_id == tenant)
                                     .order_by(incidents.c.opened_at, incidents.c.group_key))).all()
    steps = sorted((e.at, e.basis.get("incident_version") or 0, e.decision, e.reason) for e in evaluated)
    return ([s[1:] for s in steps],
            [(i.status, i.version, i.firing_count, i.group_key, i.opened_at, i.closed_at) for i in opened])


async def test_a_batch_decides_like_one_transaction_per_event(db: Database) -> None:
    await one_by_one(db, "alone")
    await as_one_batch(db, "batch")

    await as_one_batch_read_first(db, "read-first")

    alone, batch = await outcome(db, "alone"), await outcome(db, "batch")
    assert batch == alone
    assert await outcome(db, "read-first") == alone
    assert [reason for _, _, reason in alone[0]] == [
        "new_incident", "duplicate", "cooldown", "resolved_without_run", "stale", "resolved_without_run",
        "cooldown", "cooldown", "resolved_without_incident", "new_incident", "reinvestigate"]
    assert [(status, version) for status, version, *_ in alone[1]] == [("closed", 4), ("open", 3), ("open", 1)]


async def test_a_known_identity_in_a_group_the_batch_opened_fails_the_flush_then_reads_as_duplicate(
    db: Database,
) -> None:
    clock = FrozenClock(T0)
    triage = handler(clock, SETTINGS)
    first = await apply(db, triage, alert(fingerprint="fp-1", source_event_id="f1"))
    await apply(db, triage, resolved(fingerprint="fp-1", at=T0 + minutes(1), source_event_id="r1"))
    clock.advance(minutes(10))  # the incident's quiet period is over: the next alert opens another
    events = [alert(fingerprint="fp-2", at=T0 + minutes(10), source_event_id="f2"),
              alert(fingerprint="fp-1", source_event_id="f1")]  # an old identity, re-sent

    with pytest.raises(ConcurrentUpdateError):  # the consumer then applies the events one by one
        async with db.transaction() as conn:
            for event in events:
                await triage.triage(conn, event)
            await triage.finish(conn)
    opened, again = [await apply(db, triage, event) for event in events]

    assert (opened.reason, again.reason, again.basis["first_event_id"]) == (
        "cooldown", "duplicate", first.event_id)


async def test_a_batch_read_up_front_knows_an_old_identity_without_failing_the_flush(db: Database) -> None:
    clock = FrozenClock(T0)
    triage = handler(clock, SETTINGS)
    first = await apply(db, triage, alert(fingerprint="fp-1", source_event_id="f1"))
    await apply(db, triage, resolved(fingerprint="fp-1", at=T0 + minutes(1), source_event_id="r1"))
    clock.advance(minutes(10))
    events = [envelope(alert(fingerprint="fp-2", at=T0 + minutes(10), source_event_id="f2")),
              envelope(alert(fingerprint="fp-1", source_event_id="f1"))]  # an old identity, re-sent

    async with db.transaction() as conn:  # no ConcurrentUpdateError: start() read the identity
        await triage.start(conn, events)
        for env in events:
            await triage(conn, env, META)
        await triage.finish(conn)

    async with db.reader() as conn:
        found = {row.event_id: row for row in await conn.execute(select(decisions))}
    opened, again = (found[env.message_id] for env in events)
    assert (opened.reason, again.reason, again.basis["first_event_id"]) == ("cooldown", "duplicate", first.event_id)


async def test_a_batch_read_up_front_decides_with_the_noise_verdict_it_read(
    db: Database, redis_url: str, redis_prefix: str
) -> None:
    redis = Redis.from_url(redis_url)
    noise = RedisNoiseState(redis, prefix=redis_prefix)
    clock = FrozenClock(T0)
    triage = handler(clock, SETTINGS, noise=noise)
    first = await apply(db, triage, alert(fingerprint="fp-1", source_event_id="f1"))
    await apply(db, triage, resolved(fingerprint="fp-1", at=T0 + minutes(1), source_event_id="r1"))
    clock.advance(minutes(40))  # quiet period and cooldown over: only the verdict holds a new run back
    await noise.record("acme", first.basis["group_key"], NoiseVerdict(
        kind="flapping", until=T0 + minutes(70), transitions=7, alerts=8, window_seconds=300), now=T0)
    again = envelope(alert(fingerprint="fp-1", at=T0 + minutes(40), source_event_id="f2"))

    async with db.transaction() as conn:
        await triage.start(conn, [again])
        await redis.delete(verdict_key(redis_prefix, "acme", first.basis["group_key"]))  # read by start() already
        await triage(conn, again, META)
        await triage.finish(conn)
    await redis.aclose()

    async with db.reader() as conn:
        decided = (await conn.execute(select(decisions).where(decisions.c.event_id == again.message_id))).one()
    assert (decided.decision, decided.reason) == ("ignore", "flapping")
