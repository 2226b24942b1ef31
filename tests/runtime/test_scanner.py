"""The scanner re-discovers work from SQL alone (no broker involved here)."""

from __future__ import annotations

from datetime import timedelta

from sqlalchemy import select

from ira.core.clock import FrozenClock
from ira.core.envelope import Envelope
from ira.runtime.scanner import Scanner
from ira.runtime.store import runs, steps, timers
from ira.runtime.store.database import Database
from ira.runtime.store.schema import outbox
from ira.runtime.wakeup import STEP_READY, TIMER_FIRED
from tests.contracts.test_store import T0, new_run
from tests.store_fixtures import count_opened

QUIET = timedelta(seconds=10)


async def unsent(db: Database) -> list[Envelope]:
    async with db.reader() as conn:
        rows = (await conn.execute(select(outbox.c.value).where(outbox.c.sent_at.is_(None)).order_by(outbox.c.id)))
        return [Envelope.from_bytes(r.value) for r in rows]


async def mark_all_sent(db: Database) -> None:
    async with db.transaction() as conn:
        await conn.execute(outbox.update().values(sent_at=T0))


async def test_ready_step_is_woken_again_only_after_a_quiet_period(db: Database) -> None:
    clock = FrozenClock(T0)
    async with db.transaction() as conn:
        run, _ = await runs.create_run(conn, new_run(), at=T0)
    await mark_all_sent(db)  # the original wake-up went out (and was lost by the broker)
    scanner = Scanner(db=db, clock=clock, environment="prod", quiet=QUIET)
    assert (await scanner.scan_once()).woken == 0  # just created: its own wake-up may still arrive
    clock.advance(QUIET + timedelta(seconds=1))
    assert (await scanner.scan_once()).woken == 1
    [wake] = await unsent(db)
    assert wake.type == STEP_READY and wake.payload == {"run_id": run.run_id, "step_id": "metrics", "kind": "metrics"}
    assert (await scanner.scan_once()).woken == 0  # woken a moment ago
    clock.advance(QUIET + timedelta(seconds=1))
    assert (await scanner.scan_once()).woken == 1  # still nobody took it


async def test_claimed_step_is_left_alone_until_its_lease_expires(db: Database) -> None:
    clock = FrozenClock(T0)
    async with db.transaction() as conn:
        run, _ = await runs.create_run(conn, new_run(), at=T0)
        await steps.claim_step(conn, "acme", run.run_id, "metrics", owner="w", lease=timedelta(minutes=1), now=T0)
    scanner = Scanner(db=db, clock=clock, environment="staging", quiet=QUIET)
    clock.advance(timedelta(seconds=30))
    assert (await scanner.scan_once()).woken == 0
    clock.advance(timedelta(seconds=31))
    assert (await scanner.scan_once()).woken == 1  # the owner died: wake someone else
    assert [w for w in await unsent(db) if w.type == STEP_READY]


async def test_due_timer_fires_once_through_the_outbox(db: Database) -> None:
    clock = FrozenClock(T0)
    async with db.transaction() as conn:
        await timers.schedule_timer(conn, timers.Timer(tenant_id="acme", timer_id="t1", kind="approval_expiry",
                                                       run_id="r1", due_at=T0 + timedelta(minutes=30)))
    scanner = Scanner(db=db, clock=clock, environment="prod", quiet=QUIET)
    assert (await scanner.scan_once()).timers_fired == 0
    clock.advance(timedelta(minutes=31))
    assert (await scanner.scan_once()).timers_fired == 1
    assert (await scanner.scan_once()).timers_fired == 0
    fired = [w for w in await unsent(db) if w.type == TIMER_FIRED]
    assert [f.payload["timer_id"] for f in fired] == ["t1"]


async def test_outbox_backlog_is_measured(db: Database) -> None:
    clock = FrozenClock(T0)
    async with db.transaction() as conn:
        await runs.create_run(conn, new_run(), at=T0)
    clock.advance(timedelta(seconds=4))
    report = await Scanner(db=db, clock=clock, environment="prod", quiet=QUIET).scan_once()
    assert report.outbox_oldest_age == timedelta(seconds=4)


async def test_a_pass_that_finds_nothing_opens_no_write_transaction(db: Database) -> None:
    """Most passes find nothing: they read, and leave the write lock (SQLite) and BEGIN/COMMIT
    (PostgreSQL) to the transactions that have something to write."""
    clock = FrozenClock(T0)
    async with db.transaction() as conn:
        await runs.create_run(conn, new_run(), at=T0)
        await timers.schedule_timer(conn, timers.Timer(tenant_id="acme", timer_id="t1", kind="approval_expiry",
                                                       run_id="r1", due_at=T0 + timedelta(minutes=30)))
    await mark_all_sent(db)
    opened = count_opened(db, "transaction")
    scanner = Scanner(db=db, clock=clock, environment="prod", quiet=QUIET)
    report = await scanner.scan_once()
    assert (report.woken, report.timers_fired, len(opened)) == (0, 0, 0)
    assert report.backlog is not None and scanner.passes == 1  # measured all the same
    clock.advance(timedelta(minutes=31))  # the timer is due, and the step quiet long enough to wake
    report = await scanner.scan_once()
    assert (report.woken, report.timers_fired, len(opened)) == (1, 1, 2)
    assert (await scanner.scan_once()).timers_fired == 0 and len(opened) == 2  # nothing left: reads only
