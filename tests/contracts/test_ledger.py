"""Budget ledger, artifacts, outbox and timers: the same suite on every backend."""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta

import pytest

from ira.core.budget import BudgetDimension
from ira.core.commit import NewRun
from ira.core.errors import ArtifactTooLargeError, BudgetExhaustedError, NotFoundError
from ira.core.ids import new_id
from ira.runtime.store import artifacts, budget, outbox, runs, timers
from ira.runtime.store.database import Database
from tests.contracts.test_store import T0, wakeup

CALLS = BudgetDimension.TOOL_CALLS
TOKENS = BudgetDimension.MODEL_TOKENS


async def run_with_budget(db: Database, limits: dict[BudgetDimension, int]) -> str:
    run_id = new_id("run")
    new = NewRun(tenant_id="acme", run_id=run_id, task_id=new_id("task"), task_kind="diagnose",
                 subject_ref="incident:i1", workflow="incident-diagnosis@1")
    async with db.transaction() as conn:
        await runs.create_run(conn, new, at=T0)
        await budget.open_account(conn, "acme", run_id, limits)
    return run_id


async def _reserve(db: Database, run_id: str, rid: str, amount: int = 1, scope: str = "root") -> bool:
    try:
        async with db.transaction() as conn:
            await budget.reserve(conn, "acme", run_id, CALLS, amount, reservation_id=rid, at=T0, scope=scope)
        return True
    except BudgetExhaustedError:
        return False


async def balance(db: Database, run_id: str, scope: str = "root"):  # type: ignore[no-untyped-def]
    async with db.reader() as conn:
        return await budget.get_balance(conn, "acme", run_id, CALLS, scope=scope)


async def test_fifty_concurrent_reservations_against_ten_exactly_ten_win(db: Database) -> None:
    run_id = await run_with_budget(db, {CALLS: 10})
    results = await asyncio.gather(*(_reserve(db, run_id, f"r{i}") for i in range(50)))
    assert sum(results) == 10
    assert (await balance(db, run_id)).available == 0
    winners = [f"r{i}" for i, ok in enumerate(results) if ok]
    async with db.transaction() as conn:
        for rid in winners[:5]:
            await budget.settle(conn, "acme", rid, used=1, at=T0)
        for rid in winners[5:]:
            await budget.release(conn, "acme", rid, at=T0)
        await budget.settle(conn, "acme", winners[0], used=1, at=T0)  # a repeated settle changes nothing
    after = await balance(db, run_id)
    assert (after.settled, after.reserved, after.available) == (5, 0, 5)


async def test_reservation_is_idempotent_on_its_id(db: Database) -> None:
    run_id = await run_with_budget(db, {CALLS: 3})
    assert await _reserve(db, run_id, "same", 2)
    assert await _reserve(db, run_id, "same", 2)
    assert (await balance(db, run_id)).reserved == 2


async def test_usage_above_the_hold_is_charged_and_blocks_new_work(db: Database) -> None:
    run_id = await run_with_budget(db, {CALLS: 3})
    assert await _reserve(db, run_id, "r1", 1)
    async with db.transaction() as conn:
        await budget.settle(conn, "acme", "r1", used=3, at=T0)
    assert (await balance(db, run_id)).available == 0
    assert not await _reserve(db, run_id, "r2", 1)


async def test_slices_draw_from_the_root_and_cannot_widen_it(db: Database) -> None:
    run_id = await run_with_budget(db, {CALLS: 10})
    async with db.transaction() as conn:
        await budget.open_slice(conn, "acme", run_id, "metrics", {CALLS: 4}, at=T0)
    with pytest.raises(BudgetExhaustedError):
        async with db.transaction() as conn:
            await budget.open_slice(conn, "acme", run_id, "logs", {CALLS: 7}, at=T0)
    assert [await _reserve(db, run_id, f"m{i}", 1, scope="metrics") for i in range(5)] == [True] * 4 + [False]
    async with db.transaction() as conn:
        for i in range(4):
            await budget.settle(conn, "acme", f"m{i}", used=1 if i < 2 else 0, at=T0)
        await budget.close_slice(conn, "acme", run_id, "metrics", at=T0)
    root = await balance(db, run_id)
    assert (root.settled, root.reserved, root.available) == (2, 0, 8)


async def test_a_second_run_of_a_tenant_draws_its_own_slice_from_its_own_root(db: Database) -> None:
    """Reservation ids are unique per tenant: a slice id without the run would make the second
    run's slice the first run's reservation, leaving the second root uncharged."""
    first, second = await run_with_budget(db, {CALLS: 10}), await run_with_budget(db, {CALLS: 10})
    for run_id in (first, second):
        async with db.transaction() as conn:
            await budget.open_slice(conn, "acme", run_id, "metrics", {CALLS: 4}, at=T0)
    assert [(await balance(db, run_id)).reserved for run_id in (first, second)] == [4, 4]


async def test_artifacts_are_content_addressed_and_tenant_scoped(db: Database) -> None:
    async with db.transaction() as conn:
        a = await artifacts.put_artifact(conn, "acme", b'{"p95": 2.1}', media_type="application/json",
                                         max_bytes=100, at=T0)
        b = await artifacts.put_artifact(conn, "acme", b'{"p95": 2.1}', media_type="application/json",
                                         max_bytes=100, at=T0)
        assert a.ref == b.ref and a.ref.startswith("sha256:")
        assert (await artifacts.get_artifact(conn, "acme", a.ref))[1] == b'{"p95": 2.1}'
        with pytest.raises(NotFoundError):
            await artifacts.get_artifact(conn, "globex", a.ref)
        with pytest.raises(ArtifactTooLargeError):
            await artifacts.put_artifact(conn, "acme", b"x" * 101, media_type="text/plain", max_bytes=100, at=T0)


async def _claim_outbox(db: Database, relay: str, now: datetime) -> list[int]:
    async with db.transaction() as conn:
        rows = await outbox.claim_batch(conn, relay_id=relay, now=now, lease=timedelta(seconds=10), limit=50)
    return [r.id for r in rows]


async def test_outbox_rows_are_leased_to_one_relay_at_a_time(db: Database) -> None:
    async with db.transaction() as conn:
        await outbox.enqueue(conn, [wakeup("acme", f"run{i}", "metrics") for i in range(60)], at=T0)
    a, b = await asyncio.gather(_claim_outbox(db, "a", T0), _claim_outbox(db, "b", T0))
    assert not set(a) & set(b) and len(a) + len(b) == 60
    async with db.transaction() as conn:
        assert await outbox.mark_sent(conn, relay_id="a", ids=a, at=T0) == len(a)
        assert await outbox.mark_sent(conn, relay_id="a", ids=b, at=T0) == 0  # not a's rows
    assert await _claim_outbox(db, "c", T0 + timedelta(seconds=5)) == []  # b's lease is live
    assert sorted(await _claim_outbox(db, "c", T0 + timedelta(seconds=11))) == sorted(b)  # b died


async def test_outbox_age_reports_the_oldest_unsent_row(db: Database) -> None:
    async with db.transaction() as conn:
        assert await outbox.oldest_unsent_age(conn, now=T0) is None
        await outbox.enqueue(conn, [wakeup("acme", "r", "s")], at=T0)
        assert await outbox.oldest_unsent_age(conn, now=T0 + timedelta(seconds=7)) == timedelta(seconds=7)


async def test_a_due_timer_fires_once(db: Database) -> None:
    timer = timers.Timer(tenant_id="acme", timer_id="t1", kind="approval_expiry", due_at=T0 + timedelta(minutes=30))
    async with db.transaction() as conn:
        await timers.schedule_timer(conn, timer)
        assert await timers.due_timers(conn, now=T0, limit=10) == []
        due = await timers.due_timers(conn, now=T0 + timedelta(minutes=31), limit=10)
        assert [t.timer_id for t in due] == ["t1"] and due[0].due_at.tzinfo is not None
        assert await timers.mark_fired(conn, due[0], now=T0) is True
        assert await timers.mark_fired(conn, due[0], now=T0) is False


async def test_unknown_tenant_sees_no_budget(db: Database) -> None:
    run_id = await run_with_budget(db, {CALLS: 1})
    async with db.reader() as conn:
        with pytest.raises(NotFoundError):
            await budget.get_balance(conn, "globex", run_id, CALLS)
