"""An idle relay asks a reader whether there is anything to send before it claims (SQLite and
PostgreSQL): it no longer takes a write transaction every poll interval, and it still sends
what commits later and re-sends rows whose lease expired."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

import asyncpg
import asyncpg.prepared_stmt
import pytest

from ira.core.clock import FrozenClock
from ira.runtime.relay import OutboxRelay
from ira.runtime.store import outbox
from ira.runtime.store.database import Database
from tests.contracts.test_store import T0
from tests.eventually import eventually
from tests.runtime.test_intake import RecordingPublisher, TakesAndDies
from tests.runtime.test_resend import message

LEASE = timedelta(seconds=15)


async def test_an_idle_relay_does_not_wait_for_the_write_lock(db: Database) -> None:
    if db.dialect != "sqlite":
        pytest.skip("PostgreSQL has no single write lock to wait for")
    # Given a relay whose last pass found nothing
    relay = OutboxRelay(db=db, publisher=RecordingPublisher(), clock=FrozenClock(T0))
    assert await relay.relay_once() == 0
    # When it passes again while another transaction holds SQLite's write lock
    async with db.transaction():
        moved = await asyncio.wait_for(relay.relay_once(), timeout=10)
    # Then it answered from a reader, without waiting for the lock (it would wait forever here)
    assert moved == 0


async def test_after_idle_passes_the_relay_sends_what_commits_later(db: Database) -> None:
    # Given a relay that found nothing twice
    publisher, clock = RecordingPublisher(), FrozenClock(T0)
    relay = OutboxRelay(db=db, publisher=publisher, clock=clock, lease=LEASE)
    assert (await relay.relay_once(), await relay.relay_once()) == (0, 0)
    # When a transaction commits two messages
    async with db.transaction() as conn:
        await outbox.enqueue(conn, [message(message_id="m1"), message(message_id="m2")], at=T0)
    # Then the next pass sends both, and the pass after it finds nothing again
    assert await relay.relay_once() == 2
    assert await relay.relay_once() == 0
    assert sorted(r.key for r in publisher.records) == ["acme:k", "acme:k"]


async def test_an_idle_relay_resends_a_row_whose_lease_expired(db: Database) -> None:
    # Given a row another relay claimed (and died before marking it sent)
    clock = FrozenClock(T0)
    async with db.transaction() as conn:
        await outbox.enqueue(conn, [message(message_id="lost")], at=T0)
    async with db.transaction() as conn:
        assert len(await outbox.claim_batch(conn, relay_id="dead", now=T0, lease=LEASE, limit=10)) == 1
    publisher = RecordingPublisher()
    relay = OutboxRelay(db=db, publisher=publisher, clock=clock, lease=LEASE)
    # When this relay passes while the lease holds, then after it expired
    held = await relay.relay_once()
    clock.advance(LEASE + timedelta(seconds=1))
    expired = await relay.relay_once()
    # Then it leaves the leased row alone and sends it once the lease is over
    assert (held, expired, len(publisher.records)) == (0, 1, 1)


async def test_a_relay_pass_on_postgresql_is_two_statements_without_a_transaction(
        db: Database, monkeypatch: pytest.MonkeyPatch) -> None:
    if db.dialect != "postgresql":
        pytest.skip("SQLite's relay passes are write transactions (its one writer's lock)")
    publisher = RecordingPublisher()
    relay = OutboxRelay(db=db, publisher=publisher, clock=FrozenClock(T0), lease=LEASE)
    for i in range(3):  # the relay's statements are planned from their second execution on
        async with db.transaction() as conn:
            await outbox.enqueue(conn, [message(message_id=f"w{i}")], at=T0)
        assert await relay.relay_once() == 1
    async with db.transaction() as conn:
        await outbox.enqueue(conn, [message(message_id="m1"), message(message_id="m2")], at=T0)
    sent: list[str] = []
    simple, prepared = asyncpg.Connection.execute, asyncpg.prepared_stmt.PreparedStatement.fetch

    async def execute(self: asyncpg.Connection, query: str, *args: Any, **kwargs: Any) -> Any:
        sent.append(query.split()[0].rstrip(";").upper())
        return await simple(self, query, *args, **kwargs)

    async def fetch(self: asyncpg.prepared_stmt.PreparedStatement, *args: Any, **kwargs: Any) -> Any:
        sent.append(self.get_query().split()[0])
        return await prepared(self, *args, **kwargs)

    monkeypatch.setattr(asyncpg.Connection, "execute", execute)
    monkeypatch.setattr(asyncpg.prepared_stmt.PreparedStatement, "fetch", fetch)
    # When a pass sends the two
    assert await relay.relay_once() == 2
    # Then it leased them (the lanes' statement) and marked them sent: no BEGIN, no COMMIT
    assert sent == ["WITH", "UPDATE"]
    async with db.reader() as conn:
        assert await outbox.any_claimable(conn, now=T0) is False


async def test_a_commit_of_this_process_wakes_a_resting_relay_at_once(db: Database) -> None:
    # Given a running relay that found nothing and rests for a minute between polls
    publisher = RecordingPublisher()
    relay = OutboxRelay(db=db, publisher=publisher, clock=FrozenClock(T0), lease=LEASE,
                        poll_interval=timedelta(seconds=60))
    stop = asyncio.Event()
    running = asyncio.create_task(relay.run(stop))
    try:
        await eventually(lambda: relay.stats.batches == 0 and not relay.found, timeout=10)
        # When a transaction of this process commits a message for the relay
        async with db.transaction() as conn:
            await outbox.enqueue(conn, [message(message_id="now")], at=T0)
        # Then it is published well before the next poll would have found it
        await eventually(lambda: [r.key for r in publisher.records] == ["acme:k"], timeout=10)
    finally:
        # and a stop ends the rest at once too
        stop.set()
        await asyncio.wait_for(running, timeout=10)


async def test_only_a_commit_that_leaves_a_row_to_relay_wakes_the_relay(db: Database) -> None:
    wakes: list[int] = []
    with db.waking_relay(lambda: wakes.append(1)):
        # A commit whose only message a listener of this process took: nothing to relay
        with db.listening(TakesAndDies()):  # takes every message: its row is written as sent
            async with db.transaction() as conn:
                await outbox.enqueue(conn, [message(message_id="taken")], at=T0)
        assert wakes == []
        # A transaction that rolls back: nothing committed
        with pytest.raises(RuntimeError):
            async with db.transaction() as conn:
                await outbox.enqueue(conn, [message(message_id="rolled")], at=T0)
                raise RuntimeError("rolled back")
        assert wakes == []
        # A commit with a message nobody took: one wake
        async with db.transaction() as conn:
            await outbox.enqueue(conn, [message(message_id="left1"), message(message_id="left2")], at=T0)
        assert wakes == [1]
    # Once the block ended, commits wake nothing
    async with db.transaction() as conn:
        await outbox.enqueue(conn, [message(message_id="after")], at=T0)
    assert wakes == [1]
