"""Sent is not applied: the outbox's durable dedupe, and the scanner sending again what its consumer
never applied (store level, SQLite and PostgreSQL, no broker)."""

from __future__ import annotations

from datetime import timedelta

from sqlalchemy import select

from ira.core.clock import FrozenClock
from ira.core.commit import OutboxMessage
from ira.core.envelope import Envelope
from ira.core.ids import new_event_id
from ira.runtime.bus.inbox import record_inbox_many
from ira.runtime.scanner import Scanner
from ira.runtime.store import effects, outbox
from ira.runtime.store.database import Database
from ira.runtime.store.schema import outbox as outbox_table
from tests.contracts.test_store import T0

AFTER = timedelta(seconds=30)


def message(*, awaits: str | None = "triage", topic: str = "ira.alerts.v1", message_id: str | None = None,
            tenant: str = "acme") -> OutboxMessage:
    envelope = Envelope(message_id=message_id or new_event_id(), type="test.thing", tenant_id=tenant, occurred_at=T0)
    return OutboxMessage(topic=topic, key=f"{tenant}:k", envelope=envelope, awaits=awaits)


async def rows(db: Database) -> dict[str, tuple[bool, str | None, int]]:
    """message id -> (sent, awaits, resends)."""
    async with db.reader() as conn:
        found = await conn.execute(select(outbox_table.c.message_id, outbox_table.c.sent_at, outbox_table.c.awaits,
                                          outbox_table.c.resends))
        return {r.message_id: (r.sent_at is not None, r.awaits, r.resends) for r in found}


async def send_all(db: Database, clock: FrozenClock) -> None:
    """What the relay does after the broker's ack."""
    async with db.transaction() as conn:
        claimed = await outbox.claim_batch(conn, relay_id="r", now=clock.now(), lease=AFTER, limit=1000)
        await outbox.mark_sent(conn, relay_id="r", ids=[r.id for r in claimed], at=clock.now())


async def test_enqueue_new_writes_each_id_once_and_says_which_were_new(db: Database) -> None:
    first, second = message(message_id="evt-1"), message(message_id="evt-2")
    async with db.transaction() as conn:
        assert await outbox.enqueue_new(conn, [first, first], at=T0) == {("acme", "evt-1")}
    async with db.transaction() as conn:
        assert await outbox.enqueue_new(conn, [first, second], at=T0) == {("acme", "evt-2")}
        assert await outbox.enqueue_new(conn, [message(message_id="evt-1", tenant="other")], at=T0) == {
            ("other", "evt-1")}  # ids are per tenant
    assert await rows(db) == {"evt-1": (False, "triage", 0), "evt-2": (False, "triage", 0)}


async def test_a_sent_message_its_consumer_never_applied_is_sent_again_with_backoff(db: Database) -> None:
    # Given two alerts sent: triage applied one, the broker lost the other
    clock = FrozenClock(T0)
    applied, lost = message(message_id="applied"), message(message_id="lost")
    async with db.transaction() as conn:
        await outbox.enqueue(conn, [applied, lost, message(awaits=None, message_id="hint")], at=T0)
    await send_all(db, clock)
    async with db.transaction() as conn:
        await record_inbox_many(conn, consumer="triage", keys=[("acme", "applied")], at=T0)
    scanner = Scanner(db=db, clock=clock, environment="prod", resend_after=AFTER)

    # When the scanner looks before and after ``resend_after``
    assert not (await scanner.scan_once()).resent  # too early: the consumer may just be behind
    clock.advance(AFTER)
    report = await scanner.scan_once()

    # Then the lost one is unsent again (the relay re-publishes it), the applied one left alone
    assert report.resent == {"ira.alerts.v1": 1}
    assert await rows(db) == {"applied": (True, None, 0), "lost": (False, "triage", 1), "hint": (True, None, 0)}
    await send_all(db, clock)
    clock.advance(AFTER)
    assert not (await scanner.scan_once()).resent  # the second check waits twice as long
    clock.advance(AFTER)
    assert (await scanner.scan_once()).resent == {"ira.alerts.v1": 1}
    await send_all(db, clock)

    # And once its consumer applied it, the watch ends
    async with db.transaction() as conn:
        await record_inbox_many(conn, consumer="triage", keys=[("acme", "lost")], at=clock.now())
    clock.advance(AFTER * 8)
    assert not (await scanner.scan_once()).resent
    assert (await rows(db))["lost"] == (True, None, 2)


async def test_the_inbox_of_another_consumer_or_tenant_does_not_count(db: Database) -> None:
    clock = FrozenClock(T0)
    async with db.transaction() as conn:
        await outbox.enqueue(conn, [message(message_id="m", awaits="coordinator")], at=T0)
    await send_all(db, clock)
    async with db.transaction() as conn:
        await record_inbox_many(conn, consumer="triage", keys=[("acme", "m")], at=T0)
        await record_inbox_many(conn, consumer="coordinator", keys=[("other", "m")], at=T0)
    clock.advance(AFTER)
    async with db.transaction() as conn:
        assert await effects.resend_unapplied(conn, now=clock.now(), after=AFTER, limit=10) == {"ira.alerts.v1": 1}


async def test_the_backlog_is_measured_per_topic(db: Database) -> None:
    clock = FrozenClock(T0)
    async with db.transaction() as conn:
        await outbox.enqueue(conn, [message(), message()], at=T0)
        await outbox.enqueue(conn, [message(topic="ira.steps.v1", awaits=None)], at=T0 + timedelta(seconds=5))
    clock.advance(timedelta(seconds=10))
    report = await Scanner(db=db, clock=clock, environment="prod").scan_once()
    assert report.unsent == {"ira.alerts.v1": (2, timedelta(seconds=10)), "ira.steps.v1": (1, timedelta(seconds=5))}
