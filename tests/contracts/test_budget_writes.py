"""The ledger's folded writes (one-step charges, slices opened together, slices closed in one
UPDATE): the same invariants as reserve/settle, on every backend."""

from __future__ import annotations

import asyncio
from typing import Any, cast

import pytest
from sqlalchemy.engine import Dialect
from sqlalchemy.ext.asyncio import AsyncConnection

from ira.core.budget import BudgetBalance, BudgetDimension
from ira.core.errors import BudgetExhaustedError, NotFoundError
from ira.runtime.store import budget
from ira.runtime.store.database import Database
from tests.contracts.test_ledger import CALLS, balance, run_with_budget
from tests.contracts.test_store import T0

STEPS = BudgetDimension.STEPS


async def _charge(db: Database, run_id: str, rid: str, amount: int = 1) -> bool:
    try:
        async with db.transaction() as conn:
            await budget.charge(conn, "acme", run_id, CALLS, amount, reservation_id=rid, at=T0)
        return True
    except BudgetExhaustedError:
        return False


async def test_twenty_concurrent_charges_against_five_exactly_five_win_and_repeats_are_free(db: Database) -> None:
    run_id = await run_with_budget(db, {CALLS: 5})
    results = await asyncio.gather(*(_charge(db, run_id, f"c{i}") for i in range(20)))
    assert sum(results) == 5
    winner = next(f"c{i}" for i, ok in enumerate(results) if ok)
    assert await _charge(db, run_id, winner)  # idempotent on its id: charged once
    after = await balance(db, run_id)
    assert (after.settled, after.reserved, after.available) == (5, 0, 0)
    async with db.reader() as conn:
        charged = await budget.get_reservation(conn, "acme", winner)
    assert (charged.state, charged.used, charged.amount) == ("settled", 1, 1)


async def test_a_charge_that_does_not_fit_leaves_nothing(db: Database) -> None:
    run_id = await run_with_budget(db, {CALLS: 2})
    assert not await _charge(db, run_id, "big", 3)
    assert await _charge(db, run_id, "big", 2)  # the refused one wrote nothing: its id is still free
    assert (await balance(db, run_id)).available == 0


async def test_slices_opened_together_reserve_their_total_once(db: Database) -> None:
    run_id = await run_with_budget(db, {CALLS: 10, STEPS: 9})
    slices = {"metrics": {CALLS: 3, STEPS: 2}, "logs": {CALLS: 4, STEPS: 2}}
    for _ in range(2):  # a second open (a redelivered decision) funds nothing again
        async with db.transaction() as conn:
            await budget.open_slices(conn, "acme", run_id, slices, at=T0)
    assert (await balance(db, run_id)).reserved == 7
    assert [(await balance(db, run_id, scope)).limit for scope in slices] == [3, 4]
    with pytest.raises(BudgetExhaustedError):
        async with db.transaction() as conn:
            await budget.open_slices(conn, "acme", run_id, {"deploys": {CALLS: 2}, "traces": {CALLS: 2}}, at=T0)
    assert (await balance(db, run_id)).reserved == 7  # neither of the two that did not fit together


async def slice_that_used_one_and_holds_two(db: Database) -> str:
    """A run whose ``metrics`` slice (6 calls, 3 steps of the root's 10 and 5) settled one call
    and still holds two; its id."""
    run_id = await run_with_budget(db, {CALLS: 10, STEPS: 5})
    async with db.transaction() as conn:
        await budget.open_slices(conn, "acme", run_id, {"metrics": {CALLS: 6, STEPS: 3}}, at=T0)
        await budget.reserve(conn, "acme", run_id, CALLS, 2, reservation_id="m1", at=T0, scope="metrics")
        await budget.settle(conn, "acme", "m1", used=1, at=T0)
        await budget.reserve(conn, "acme", run_id, CALLS, 2, reservation_id="m2", at=T0, scope="metrics")
    return run_id


async def test_closing_a_slice_settles_its_use_and_open_holds_on_the_root_once(db: Database) -> None:
    run_id = await slice_that_used_one_and_holds_two(db)
    for _ in range(2):  # a second close changes nothing
        async with db.transaction() as conn:
            await budget.close_slice(conn, "acme", run_id, "metrics", at=T0)
    root = await balance(db, run_id)
    assert (root.settled, root.reserved, root.available) == (3, 0, 7)  # 1 settled + 2 still held
    async with db.reader() as conn:
        steps = await budget.get_balance(conn, "acme", run_id, STEPS)
        parent = await budget.get_reservation(conn, "acme", f"slice:{run_id}:metrics:tool_calls")
    assert (steps.settled, steps.reserved) == (0, 0)
    assert (parent.state, parent.used) == ("settled", 3)


class _Counted:
    """A connection that counts the statements the ledger sends through it (a statement is a
    round trip on PostgreSQL; a branch sends its ledger's while it holds its run's row lock)."""

    def __init__(self, conn: AsyncConnection) -> None:
        self._conn, self.statements = conn, 0

    @property
    def dialect(self) -> Dialect:
        return self._conn.dialect

    @property
    def info(self) -> dict[Any, Any]:
        return self._conn.info

    async def execute(self, statement: Any, parameters: Any = None) -> Any:
        self.statements += 1
        return await self._conn.execute(statement, parameters)


async def test_each_ledger_write_of_a_run_is_one_statement_on_postgresql(db: Database) -> None:
    # Given a run whose root can fund two slices of two dimensions
    run_id = await run_with_budget(db, {CALLS: 10, STEPS: 9})
    pg = db.engine.dialect.name == "postgresql"
    async with db.transaction() as conn:
        # When the slices are opened, a step charged and a slice closed
        counted = _Counted(conn)
        await budget.open_slices(cast(AsyncConnection, counted), "acme", run_id,
                                 {"metrics": {CALLS: 3, STEPS: 2}, "logs": {CALLS: 4, STEPS: 2}}, at=T0)
        opened, counted.statements = counted.statements, 0
        await budget.charge(cast(AsyncConnection, counted), "acme", run_id, STEPS, 1, reservation_id="s1", at=T0)
        charged = counted.statements
        await budget.reserve(conn, "acme", run_id, CALLS, 2, reservation_id="m1", at=T0, scope="metrics")
        await budget.settle(conn, "acme", "m1", used=1, at=T0)  # metrics used one call
        counted.statements = 0
        await budget.close_slice(cast(AsyncConnection, counted), "acme", run_id, "metrics", at=T0)
        closed = counted.statements
    # Then each is one statement on PostgreSQL (SQLite: one per table, the holds one per dimension)
    assert (opened, charged, closed) == ((1, 1, 1) if pg else (4, 2, 2))
    # And they wrote what the statement-per-table writes did
    root, steps = await balance(db, run_id), await balance_of(db, run_id, STEPS)
    assert (root.reserved, root.settled) == (4, 1)  # logs' 4 still held; metrics' one call settled
    assert (steps.reserved, steps.settled) == (2, 1)  # logs' 2 held; the charged step
    assert (await balance(db, run_id, "logs")).limit == 4


async def test_slices_that_do_not_fit_name_the_dimension_short_and_write_nothing(db: Database) -> None:
    # Given a root with room for the slices' calls but not their steps
    run_id = await run_with_budget(db, {CALLS: 10, STEPS: 3})
    # When two slices asking 2 steps each are opened together
    with pytest.raises(BudgetExhaustedError) as refused:
        async with db.transaction() as conn:
            await budget.open_slices(conn, "acme", run_id, {"metrics": {CALLS: 3, STEPS: 2},
                                                            "logs": {CALLS: 4, STEPS: 2}}, at=T0)
    # Then the error names the steps, their total and what the root had
    assert (refused.value.dimension, refused.value.requested, refused.value.available) == ("steps", 4, 3)
    # And nothing was held or opened: the calls' hold that fitted went back with it
    assert ((await balance(db, run_id)).reserved, (await balance_of(db, run_id, STEPS)).reserved) == (0, 0)
    async with db.reader() as conn:
        with pytest.raises(NotFoundError):
            await budget.get_balance(conn, "acme", run_id, CALLS, scope="metrics")


async def balance_of(db: Database, run_id: str, dimension: BudgetDimension) -> BudgetBalance:
    async with db.reader() as conn:
        return await budget.get_balance(conn, "acme", run_id, dimension)
