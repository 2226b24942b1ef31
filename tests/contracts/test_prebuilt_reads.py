"""The store's polls and lookups are statements built once (the scanner's, re-drive's and replay
loop's every pass, a decision's run lookups, ``append_events``' numbering): after their first execution they
run from a compiled plan on both drivers (``pg_fast``, ``sqlite_fast``), never through
SQLAlchemy's ``execute``, and they answer as the statements they replaced did."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Any

import pytest
from sqlalchemy.ext.asyncio import AsyncConnection

from ira.coordinator.intake import _existing, open_run_for
from ira.core.budget import BudgetDimension
from ira.core.commit import EventDraft
from ira.core.errors import NotFoundError
from ira.core.events import RunEventType
from ira.replay import store as replay_store
from ira.runtime.store import budget, effects, outbox, parked, runs, steps, timers
from ira.runtime.store.backlog import read_backlog
from ira.runtime.store.database import Database
from ira.runtime.store.parked import ParkedRecord, ParkedState
from tests.contracts.test_ledger import CALLS, balance, run_with_budget
from tests.contracts.test_store import T0, create, event_seqs, new_run

STEPS = BudgetDimension.STEPS

POLLS: dict[str, Callable[[AsyncConnection], Awaitable[Any]]] = {
    "intake._existing": lambda c: _existing(c, "acme", "key", "inc"),
    "intake.open_run_for": lambda c: open_run_for(c, "acme", "inc"),
    "timers.due_timers": lambda c: timers.due_timers(c, now=T0, limit=10),
    "parked.find_due": lambda c: parked.find_due(c, "triage", now=T0, limit=10),
    "parked.summarize": lambda c: parked.summarize(c, "triage", now=T0),
    "effects.any_to_settle": lambda c: effects.any_to_settle(c, now=T0, after=timedelta(seconds=30)),
    "replay.active": lambda c: replay_store.active(c, limit=2),
    "backlog.read_backlog": lambda c: read_backlog(c, now=T0),
    "outbox.oldest_unsent_age": lambda c: outbox.oldest_unsent_age(c, now=T0),
    "effects.unsent_by_topic": lambda c: effects.unsent_by_topic(c, now=T0),
    "effects.resend_unapplied": lambda c: effects.resend_unapplied(c, now=T0, after=timedelta(seconds=30), limit=10),
    "steps.find_wakeable": lambda c: steps.find_wakeable(c, now=T0, quiet=timedelta(seconds=10), limit=10),
    "runs._find_by_key": lambda c: runs._find_by_key(c, "acme", "key"),
    "runs.append_events": lambda c: _append_to_missing_run(c),
}


async def _append_to_missing_run(conn: AsyncConnection) -> None:
    """``append_events``' numbering UPDATE (it finds no run, so nothing else runs)."""
    with pytest.raises(NotFoundError):
        await runs.append_events(conn, "acme", "run-none", [EventDraft(type=RunEventType.DECISION_REFUSED)], at=T0)


def _sqlalchemys_path(monkeypatch: pytest.MonkeyPatch) -> list[object]:
    """The statements that take SQLAlchemy's ``execute`` from now on (the fast paths never call it)."""
    slow: list[object] = []
    sqlalchemys = AsyncConnection.execute

    async def counted(self: AsyncConnection, statement: Any, *args: Any, **kwargs: Any) -> Any:
        slow.append(statement)
        return await sqlalchemys(self, statement, *args, **kwargs)

    monkeypatch.setattr(AsyncConnection, "execute", counted)
    return slow


@pytest.mark.parametrize("call", sorted(POLLS))
async def test_a_poll_or_lookup_runs_from_its_plan_once_seen(
        db: Database, call: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # Given the call made twice (a statement seen once keeps SQLAlchemy's path)
    for _ in range(2):
        async with db.transaction() as conn:
            await POLLS[call](conn)
    # When it is made again
    slow = _sqlalchemys_path(monkeypatch)
    async with db.transaction() as conn:
        await POLLS[call](conn)
    # Then none of its statements took SQLAlchemy's path (one built per call always does)
    assert slow == []


async def test_append_events_numbers_them_after_the_runs_last_event(db: Database) -> None:
    run = await create(db, new_run(key="k1"))
    drafts = [EventDraft(type=RunEventType.DECISION_REFUSED, data={"n": i}) for i in range(2)]
    for _ in range(2):  # the second time from its plan
        async with db.transaction() as conn:
            last = await runs.append_events(conn, "acme", run.run_id, drafts, at=T0)
    assert last == 5
    assert await event_seqs(db, run.run_id) == [1, 2, 3, 4, 5]
    async with db.transaction() as conn:
        assert (await runs._find_by_key(conn, "acme", "k1")).run_id == run.run_id  # type: ignore[union-attr]
        assert await runs._find_by_key(conn, "other", "k1") is None


async def test_due_timers_are_the_unfired_due_ones_soonest_first_up_to_the_limit(db: Database) -> None:
    async with db.transaction() as conn:
        for i, minutes in enumerate((-1, -3, 0, 1, -2)):
            await timers.schedule_timer(conn, timers.Timer(tenant_id="acme", timer_id=f"t{i}", kind="deadline",
                                                           due_at=T0 + timedelta(minutes=minutes)))
        assert await timers.mark_fired(conn, timers.Timer(tenant_id="acme", timer_id="t4", kind="deadline",
                                                          due_at=T0), now=T0)
    for _ in range(2):
        async with db.transaction() as conn:
            due = await timers.due_timers(conn, now=T0, limit=10)
            two = await timers.due_timers(conn, now=T0, limit=2)
    assert [t.timer_id for t in due] == ["t1", "t0", "t2"]  # t3 not due yet, t4 fired
    assert [t.timer_id for t in two] == ["t1", "t0"]
    assert due[0].due_at == T0 - timedelta(minutes=3)


def _record(message_id: str, consumer: str = "triage") -> ParkedRecord:
    return ParkedRecord(tenant_id="acme", consumer=consumer, message_id=message_id, topic="ira.alerts.v1",
                        partition=0, offset=1, timestamp_ms=0, key=None, value=b"v", headers={}, attempts=1,
                        error_code="transient", reason="down")


async def test_parked_due_rows_are_the_consumers_parked_ones_due_by_now(db: Database) -> None:
    async with db.transaction() as conn:
        for message_id, minutes in (("late", -1), ("early", -5), ("later", 5), ("dead", -9)):
            await parked.park(conn, _record(message_id), at=T0, due_at=T0 + timedelta(minutes=minutes))
        await parked.park(conn, _record("theirs", consumer="other"), at=T0, due_at=T0 - timedelta(minutes=9))
        await parked.keep_dead_letter(conn, _record("dead"), at=T0)
    for _ in range(2):
        async with db.transaction() as conn:
            due = await parked.find_due(conn, "triage", now=T0, limit=10)
            one = await parked.find_due(conn, "triage", now=T0, limit=1)
    assert [(r.message_id, r.state) for r in due] == [("early", ParkedState.PARKED), ("late", ParkedState.PARKED)]
    assert [r.message_id for r in one] == ["early"]


async def test_a_decisions_lookups_find_the_keyed_run_and_the_incidents_open_run(db: Database) -> None:
    keyed = new_run(key="evl-1").model_copy(update={"incident_id": "inc-1"})
    await create(db, keyed)
    for _ in range(2):
        async with db.transaction() as conn:
            same, open_one = await _existing(conn, "acme", "evl-1", "inc-1")
            other_key, _ = await _existing(conn, "acme", "evl-2", "inc-1")
            found = await open_run_for(conn, "acme", "inc-1")
            none = await open_run_for(conn, "acme", "inc-2")
    assert same is not None and same.run_id == keyed.run_id
    assert open_one is not None and open_one.run_id == keyed.run_id
    assert other_key is None
    assert found is not None and found.run_id == keyed.run_id
    assert none is None



async def test_a_runs_slices_are_funded_from_a_plan_with_the_reservations_they_had(
        db: Database, monkeypatch: pytest.MonkeyPatch) -> None:
    run_id = await run_with_budget(db, {CALLS: 10, STEPS: 9})
    slices = {"metrics": {CALLS: 3, STEPS: 2}, "logs": {CALLS: 4}}
    for _ in range(2):  # the second time funds nothing: seen twice
        async with db.transaction() as conn:
            await budget.open_slices(conn, "acme", run_id, slices, at=T0)
    # When slices are opened again, the reservations' insert planned
    slow = _sqlalchemys_path(monkeypatch)
    async with db.transaction() as conn:
        await budget.open_slices(conn, "acme", run_id, slices, at=T0)
    assert slow == []
    async with db.reader() as conn:
        held = {rid: (r.run_id, r.scope, r.dimension, r.amount, r.state, r.used) for rid, r in [
            (f"{scope}:{dim.value}", await budget.get_reservation(conn, "acme", f"slice:{run_id}:{scope}:{dim.value}"))
            for scope, limits in slices.items() for dim in limits]}
    # Then each slice dimension is one reservation on the root, held, written once
    assert held == {"metrics:tool_calls": (run_id, "root", CALLS, 3, "reserved", None),
                    "metrics:steps": (run_id, "root", STEPS, 2, "reserved", None),
                    "logs:tool_calls": (run_id, "root", CALLS, 4, "reserved", None)}
    root = await balance(db, run_id)
    assert root.reserved == 7
