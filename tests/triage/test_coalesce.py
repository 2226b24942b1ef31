"""Coalesced delivery in triage's transaction, on SQLite and PostgreSQL: follow-ups to an active
run are folded into its subscription and leave as few updates, at most one per interval, at once
when the incident is all resolved or its severity rose; nothing is lost or sent twice across a
rolled-back transaction, a restart, or the sweeper racing the consumer.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
from collections.abc import Sequence
from datetime import timedelta

import pytest

from ira.core.alert import AlertEvent, Severity
from ira.core.clock import FrozenClock, SystemClock
from ira.core.decision import IncidentUpdate
from ira.core.errors import ConcurrentUpdateError
from ira.runtime.settings.triage import NoiseSettings, TriageSettings
from ira.runtime.store.database import Database
from ira.triage.sweep import send_due_updates
from ira.triage.worker import TriageHandler
from tests.eventually import eventually
from tests.triage.builders import T0, alert, resolved
from tests.triage.harness import ENV, apply, evaluations, handler, minutes, published, start_run, updates_sent

INTERVAL = timedelta(seconds=10)


@pytest.fixture
def clock() -> FrozenClock:
    return FrozenClock(T0)


def settings(**overrides: object) -> TriageSettings:
    return TriageSettings.model_validate({"update_interval": INTERVAL, **overrides})


async def apply_batch(db: Database, triage: TriageHandler, events: Sequence[AlertEvent], *, clock: FrozenClock,
                      step: timedelta) -> None:
    """One consumer transaction over ``events`` (the clock moving ``step`` per event), retried on a lost race."""
    for _ in range(20):
        start = clock.now()
        try:
            async with db.transaction() as conn:
                for event in events:
                    await triage.triage(conn, event)
                    clock.advance(step)
                await triage.finish(conn)
            return
        except ConcurrentUpdateError:
            clock.advance(start - clock.now())  # the batch did not happen: neither did its time
    raise AssertionError("still conflicting after 20 tries")


async def with_run(db: Database, triage: TriageHandler) -> str:
    opened = await apply(db, triage, alert(fingerprint="fp-0"))
    return await start_run(db, opened.incident_id)


def storm(n: int, *, start: int = 1, name: str = "HighErrorRate") -> list[AlertEvent]:
    """Distinct alerts of one group (each a new fingerprint joining the incident)."""
    return [alert(name, fingerprint=f"fp-{i}", at=T0 + timedelta(seconds=i / 10)) for i in range(start, start + n)]


async def test_a_storm_of_follow_ups_is_a_few_updates_and_no_alert_is_lost(db: Database, clock: FrozenClock) -> None:
    # Given an incident with an active run
    triage = handler(clock, settings())
    run_id = await with_run(db, triage)
    # When 600 follow-ups arrive over 60 s, in consumer batches of 20, and the sweeper runs after them
    n, seconds, step = 600, 60, timedelta(milliseconds=100)
    for i in range(0, n, 20):
        await apply_batch(db, triage, storm(20, start=1 + i), clock=clock, step=step)
    clock.advance(INTERVAL)
    await send_due_updates(db, clock, environment=ENV)
    # Then at most one update per interval (the first one at once), every follow-up counted once
    sent = await updates_sent(db)
    assert len(sent) <= math.ceil(seconds / INTERVAL.total_seconds()) + 1
    assert [u.seq for u in sent] == list(range(1, len(sent) + 1)) and {u.run_id for u in sent} == {run_id}
    assert sum(u.changes.events for u in sent) == n and sum(u.changes.joined for u in sent) == n
    assert sent[-1].changes.incident_version == n + 1 and sent[-1].changes.firing_count == n + 1
    assert [d.decision for d in await published(db)] == ["create_run"]
    gaps = [(b.changes.first_seen - a.changes.last_seen) for a, b in zip(sent, sent[1:], strict=False)]
    assert all(g > timedelta(0) for g in gaps)  # folds do not overlap


async def test_all_resolved_goes_out_at_once_inside_the_interval(db: Database, clock: FrozenClock) -> None:
    triage = handler(clock, settings())
    await with_run(db, triage)
    await apply(db, triage, alert(fingerprint="fp-1"))  # the first follow-up: at once
    clock.advance(timedelta(seconds=1))
    await apply(db, triage, resolved(fingerprint="fp-1", at=T0 + minutes(1)))  # held: inside the interval
    assert len(await updates_sent(db)) == 1
    clock.advance(timedelta(seconds=1))
    await apply(db, triage, resolved(fingerprint="fp-0", at=T0 + minutes(2)))  # the last firing alert
    first, second = await updates_sent(db)
    assert (second.trigger, second.changes.events, second.changes.resolved, second.all_resolved) == (
        "all_resolved", 2, 2, True)
    assert second.changes.last_seen - first.changes.last_seen == timedelta(seconds=2)


async def test_a_raised_severity_goes_out_at_once_and_a_known_one_waits(db: Database, clock: FrozenClock) -> None:
    triage = handler(clock, settings())
    opened = await apply(db, triage, alert(fingerprint="fp-0", severity=Severity.WARNING))
    await start_run(db, opened.incident_id)
    for i, severity in enumerate((Severity.WARNING, Severity.WARNING, Severity.CRITICAL, Severity.WARNING), 1):
        clock.advance(timedelta(seconds=1))
        await apply(db, triage, alert(fingerprint=f"fp-{i}", severity=severity))
    sent = await updates_sent(db)
    assert [(u.trigger, u.changes.events, u.changes.severity) for u in sent] == [
        ("interval", 1, "warning"), ("severity_raised", 2, "critical")]
    clock.advance(INTERVAL)
    assert await send_due_updates(db, clock, environment=ENV) == 1  # the last one waited for the interval
    assert (await updates_sent(db))[-1].trigger == "interval"


async def test_the_sweeper_sends_a_due_fold_once(db: Database, clock: FrozenClock) -> None:
    triage = handler(clock, settings())
    await with_run(db, triage)
    await apply(db, triage, alert(fingerprint="fp-1"))
    await apply(db, triage, alert(fingerprint="fp-2"))
    assert await send_due_updates(db, clock, environment=ENV) == 0  # not due yet
    clock.advance(INTERVAL)
    sent = [await send_due_updates(db, clock, environment=ENV) for _ in range(3)]
    assert sent == [1, 0, 0]
    assert [(u.seq, u.changes.events) for u in await updates_sent(db)] == [(1, 1), (2, 1)]


async def test_a_rolled_back_batch_and_a_restart_lose_no_follow_up_and_send_none_twice(
    db: Database, clock: FrozenClock
) -> None:
    # Given a run whose first update went out and three follow-ups folded, waiting for the interval
    before = handler(clock, settings())
    await with_run(db, before)
    for event in storm(4):
        clock.advance(timedelta(seconds=1))
        await apply(db, before, event)
    # When a batch folds two more and dies before its commit (a crash mid-transaction)
    crashed = storm(2, start=5)
    with pytest.raises(RuntimeError):
        async with db.transaction() as conn:
            for event in crashed:
                await before.triage(conn, event)
            await before.finish(conn)
            raise RuntimeError("killed before the commit")
    # and triage restarts (a new handler: nothing in memory) and Kafka redelivers those two
    after = handler(clock, settings())
    await apply_batch(db, after, crashed, clock=clock, step=timedelta(seconds=1))
    clock.advance(INTERVAL)
    await send_due_updates(db, clock, environment=ENV)
    await send_due_updates(db, clock, environment=ENV)
    # Then every follow-up is in exactly one update
    sent = await updates_sent(db)
    assert [(u.seq, u.changes.events) for u in sent] == [(1, 1), (2, 5)]
    assert sum(1 for e in await evaluations(db) if e["decision"] == "deliver") == 6


async def test_the_sweeper_racing_the_consumer_loses_and_duplicates_nothing(db: Database) -> None:
    clock = SystemClock()  # real time: folds become due while the consumer keeps folding
    triage = handler(clock, settings(update_interval=timedelta(milliseconds=20)))  # type: ignore[arg-type]
    opened = await apply(db, triage, alert(fingerprint="fp-0"))
    await start_run(db, opened.incident_id, at=clock.now())
    n = 120
    stop = asyncio.Event()

    async def sweeping() -> None:
        while not stop.is_set():
            with contextlib.suppress(ConcurrentUpdateError):  # the consumer won the row: next tick
                await send_due_updates(db, clock, environment=ENV)
            await asyncio.sleep(0.005)  # the sweeper's tick

    sweeper = asyncio.create_task(sweeping())
    for i in range(0, n, 6):
        await apply_real(db, triage, storm(6, start=1 + i))
    stop.set()
    await sweeper

    async def all_sent() -> list[IncidentUpdate] | None:
        await send_due_updates(db, clock, environment=ENV)
        sent = await updates_sent(db)
        return sent if sum(u.changes.events for u in sent) >= n else None

    sent = await eventually(all_sent, timeout=5)
    assert [u.seq for u in sent] == list(range(1, len(sent) + 1)) and len(sent) > 1
    assert sum(u.changes.events for u in sent) == n


async def apply_real(db: Database, triage: TriageHandler, events: Sequence[AlertEvent]) -> None:
    for _ in range(50):
        try:
            async with db.transaction() as conn:
                for event in events:
                    await triage.triage(conn, event)
                await triage.finish(conn)
            return
        except ConcurrentUpdateError:
            continue
    raise AssertionError("still conflicting after 50 tries")


async def test_a_flapping_follow_up_is_decided_in_sql_with_its_basis(db: Database, clock: FrozenClock) -> None:
    # Given a run, no noise worker (its verdict never comes), flapping at 6 flips in 5 minutes
    triage = handler(clock, settings(noise=NoiseSettings(enabled=False, flapping_transitions=6)))
    run_id = await with_run(db, triage)
    # When the alert fires and resolves a dozen times in ten minutes
    flips = []
    for i in range(12):
        clock.advance(timedelta(seconds=25))
        event = (resolved if i % 2 == 0 else alert)(fingerprint="fp-0", at=T0 + timedelta(seconds=25 * (i + 1)))
        flips.append(await apply(db, triage, event))
    # Then the first five are delivered (folded), the rest are flapping decisions with the count as basis
    assert [f.decision for f in flips] == ["deliver"] * 5 + ["ignore"] * 7
    flapping = flips[5:]
    assert {f.reason for f in flapping} == {"flapping"}
    assert [f.basis["flips"]["transitions"] for f in flapping] == list(range(6, 13))
    assert all(f.basis["run_id"] == run_id and f.basis["flapping_transitions"] == 6 for f in flapping)
    assert len(await updates_sent(db)) == 5 and len(await published(db)) == 1  # one run
