"""Ledger writes that wait for the run's next commit (``budget.charge_with_commit``,
``close_slice_with_commit``): on PostgreSQL its compare-and-set writes them, after it took the
run's row; on SQLite they go at once. Either way the ledger ends as the separate calls left it,
a charge that does not fit fails the commit, and nothing waits past its transaction."""

from __future__ import annotations

import asyncio

import pytest
from sqlalchemy import text

from ira.core.budget import BudgetDimension
from ira.core.commit import EventDraft, RunCommit
from ira.core.errors import BudgetExhaustedError
from ira.core.events import RunEventType
from ira.runtime.store import budget, runs
from ira.runtime.store.database import Database
from tests.contracts.test_budget_writes import slice_that_used_one_and_holds_two
from tests.contracts.test_ledger import balance, run_with_budget
from tests.contracts.test_store import T0
from tests.store_fixtures import statements, until_blocked_by

STEPS = BudgetDimension.STEPS
NOTE = EventDraft(type=RunEventType.RUN_STARTED, data={})


def _commit(run_id: str, version: int) -> RunCommit:
    return RunCommit(tenant_id="acme", run_id=run_id, expected_version=version, events=(NOTE,))


async def _steps(db: Database, run_id: str):  # type: ignore[no-untyped-def]
    async with db.reader() as conn:
        return await budget.get_balance(conn, "acme", run_id, STEPS)


async def _version(db: Database, run_id: str) -> tuple[int, int]:
    async with db.reader() as conn:
        run = await runs.get_run(conn, "acme", run_id)
    return run.state_version, run.last_seq


def _writes(seen: list[str], table: str) -> list[str]:
    return [s for s in seen if table in s and not s.startswith("SELECT budget_accounts")]


async def test_a_charge_with_the_commit_is_written_by_the_runs_compare_and_set(db: Database) -> None:
    # Given a run with two steps of budget
    run_id = await run_with_budget(db, {STEPS: 2})
    # When a step is charged with its commit
    with statements(db) as seen:
        async with db.transaction() as conn:
            await budget.charge_with_commit(conn, "acme", run_id, STEPS, 1, reservation_id="s1", at=T0)
            await runs.commit(conn, _commit(run_id, 1), at=T0)
    # Then it is charged once, with the commit applied
    after = await _steps(db, run_id)
    assert (after.settled, after.reserved) == (1, 0)
    assert await _version(db, run_id) == (2, 2)
    # And on PostgreSQL by the compare-and-set's statement itself (SQLite: statements of their own)
    charging = _writes(seen, "budget_reservations")
    if db.engine.dialect.name == "postgresql":
        assert len(charging) == 1 and "UPDATE runs" in charging[0]
    else:
        assert charging and all("UPDATE runs" not in s for s in charging)


async def test_a_charge_that_does_not_fit_fails_its_commit_which_writes_nothing(db: Database) -> None:
    # Given a run whose one step of budget is spent
    run_id = await run_with_budget(db, {STEPS: 1})
    async with db.transaction() as conn:
        await budget.charge(conn, "acme", run_id, STEPS, 1, reservation_id="s1", at=T0)
    # When another step is charged with a commit
    with pytest.raises(BudgetExhaustedError) as refused:
        async with db.transaction() as conn:
            await budget.charge_with_commit(conn, "acme", run_id, STEPS, 1, reservation_id="s2", at=T0)
            await runs.commit(conn, _commit(run_id, 1), at=T0)
    # Then the error names what was short, and neither the commit nor the charge was written
    assert (refused.value.dimension, refused.value.available) == (STEPS.value, 0)
    assert await _version(db, run_id) == (1, 1)
    assert (await _steps(db, run_id)).settled == 1
    async with db.transaction() as conn:  # the refused charge's id is still free
        await budget.open_account(conn, "acme", run_id, {STEPS: 5}, scope="more")
        await budget.charge(conn, "acme", run_id, STEPS, 1, reservation_id="s2", at=T0, scope="more")


async def test_a_waiting_charge_is_written_before_the_ledger_reads_and_before_commit(db: Database) -> None:
    # Given a run with budget
    run_id = await run_with_budget(db, {STEPS: 5})
    async with db.transaction() as conn:
        # When a charge waits for a commit and the ledger is read in the same transaction
        await budget.charge_with_commit(conn, "acme", run_id, STEPS, 1, reservation_id="s1", at=T0)
        seen_inside = await budget.get_balance(conn, "acme", run_id, STEPS)
        # and another charge waits for a commit that never comes
        await budget.charge_with_commit(conn, "acme", run_id, STEPS, 1, reservation_id="s2", at=T0)
    # Then the read saw the first, and the transaction wrote the second before it committed
    assert seen_inside.settled == 1
    assert (await _steps(db, run_id)).settled == 2
    assert await _version(db, run_id) == (1, 1)


async def test_a_charge_waiting_for_its_run_is_not_carried_by_another_runs_commit(db: Database) -> None:
    # Given two runs
    mine, other = await run_with_budget(db, {STEPS: 5}), await run_with_budget(db, {STEPS: 5})
    # When a charge of one waits and the other commits
    async with db.transaction() as conn:
        await budget.charge_with_commit(conn, "acme", mine, STEPS, 1, reservation_id="s1", at=T0)
        await runs.commit(conn, _commit(other, 1), at=T0)
    # Then the charge is the first run's, and only the second run moved
    assert ((await _steps(db, mine)).settled, (await _steps(db, other)).settled) == (1, 0)
    assert (await _version(db, mine), await _version(db, other)) == ((1, 1), (2, 2))


async def test_a_write_waiting_in_a_rolled_back_transaction_is_gone_with_it(db: Database) -> None:
    # Given a run, and a transaction that lets a charge wait and then fails
    run_id = await run_with_budget(db, {STEPS: 5})
    with pytest.raises(RuntimeError):
        async with db.transaction() as conn:
            await budget.charge_with_commit(conn, "acme", run_id, STEPS, 1, reservation_id="s1", at=T0)
            raise RuntimeError("the step failed")
    # When the next transactions commit the run (on whatever pooled connection they get)
    for version in (1, 2):
        async with db.transaction() as conn:
            await runs.commit(conn, _commit(run_id, version), at=T0)
    # Then the failed transaction's charge was never written
    assert (await _steps(db, run_id)).settled == 0
    assert await _version(db, run_id) == (3, 3)


async def test_a_slice_closed_with_the_commit_settles_the_root_as_close_slice_does(db: Database) -> None:
    # Given a slice that used one call and still holds two
    run_id = await slice_that_used_one_and_holds_two(db)
    # When the branch closes it with its commit, twice (a second close changes nothing)
    with statements(db) as seen:
        for version in (1, 2):
            async with db.transaction() as conn:
                await budget.close_slice_with_commit(conn, "acme", run_id, "metrics", at=T0)
                await runs.commit(conn, _commit(run_id, version), at=T0)
    # Then the root is charged what the slice used, the holds still open counting as used
    root, steps = await balance(db, run_id), await _steps(db, run_id)
    assert (root.settled, root.reserved, root.available) == (3, 0, 7)
    assert (steps.settled, steps.reserved) == (0, 0)
    # And on PostgreSQL no statement but the compare-and-set wrote it
    if db.engine.dialect.name == "postgresql":
        assert all("UPDATE runs" in s for s in _writes(seen, "closed_parents"))


async def test_a_commit_carrying_a_ledger_write_takes_the_runs_row_before_the_roots(db: Database) -> None:
    """The lock order of every writer: a commit that waits for the run's row holds no budget row
    meanwhile (a writer holding the run and charging the root would deadlock with it)."""
    if db.engine.dialect.name != "postgresql":
        pytest.skip("SQLite has one writer: no row locks")
    # Given a run whose row another transaction holds
    run_id = await run_with_budget(db, {STEPS: 5})
    async with db.engine.connect() as holder:
        await holder.execute(text("SELECT run_id FROM runs WHERE run_id = :r FOR UPDATE"), {"r": run_id})
        holder_pid = (await holder.execute(text("SELECT pg_backend_pid()"))).scalar_one()

        async def charged_commit() -> None:
            async with db.transaction() as conn:
                await budget.charge_with_commit(conn, "acme", run_id, STEPS, 1, reservation_id="s1", at=T0)
                await runs.commit(conn, _commit(run_id, 1), at=T0)

        # When a commit carrying a charge waits for that row
        waiting = asyncio.create_task(charged_commit())
        await until_blocked_by(db, holder_pid, "the charged commit")
        # Then the root's budget row is free to another writer meanwhile
        async with db.engine.connect() as other:
            locked = await other.execute(text(
                "SELECT dimension FROM budget_accounts WHERE run_id = :r FOR UPDATE NOWAIT"), {"r": run_id})
            assert [r.dimension for r in locked] == [STEPS.value]
            await other.rollback()
        await holder.rollback()
    await asyncio.wait_for(waiting, timeout=10)
    assert (await _steps(db, run_id)).settled == 1
