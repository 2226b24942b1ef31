"""Budget holds of one turn, drawn from the branch's slice (account scope = step id).

Only dimensions the slice budgets are reserved (a dimension left out is unlimited).
Reservation ids carry the owner's epoch: a turn re-done by a new owner after a crash holds
anew, and the old, never-settled hold still counts as used when the slice is closed, because
the call may well have happened (retries and re-samples are charged).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime

from sqlalchemy.ext.asyncio import AsyncConnection

from ira.core.budget import BudgetDimension
from ira.core.errors import BudgetExhaustedError
from ira.core.run import Claim
from ira.runtime.store import budget


@dataclass
class TurnHolds:
    """What one turn reserved, by dimension -> reservation id."""

    held: dict[BudgetDimension, str] = field(default_factory=dict)
    used: dict[BudgetDimension, int] = field(default_factory=dict)

    def use(self, dim: BudgetDimension, amount: int) -> None:
        self.used[dim] = self.used.get(dim, 0) + amount


@dataclass(frozen=True)
class SliceLedger:
    claim: Claim
    budgeted: frozenset[BudgetDimension]

    async def reserve(
        self, conn: AsyncConnection, holds: TurnHolds, amounts: Mapping[BudgetDimension, int], *, turn: int,
        at: datetime,
    ) -> None:
        """Hold every budgeted amount or none (BudgetExhaustedError; the caller's transaction rolls back)."""
        c = self.claim
        for dim, amount in amounts.items():
            if dim not in self.budgeted or amount <= 0 or dim in holds.held:
                continue
            rid = f"{c.run_id}:{c.step_id}:e{c.owner_epoch}:t{turn}:{dim.value}"  # unique per tenant: run first
            await budget.reserve(conn, c.tenant_id, c.run_id, dim, amount, reservation_id=rid, at=at, scope=c.step_id)
            holds.held[dim] = rid

    async def settle(self, conn: AsyncConnection, holds: TurnHolds, *, at: datetime) -> None:
        for dim, rid in holds.held.items():
            await budget.settle(conn, self.claim.tenant_id, rid, used=holds.used.get(dim, 0), at=at)
        holds.held.clear()

    async def available(self, conn: AsyncConnection, dim: BudgetDimension) -> int | None:
        if dim not in self.budgeted:
            return None
        c = self.claim
        balance = await budget.get_balance(conn, c.tenant_id, c.run_id, dim, scope=c.step_id)
        return balance.available

    async def totals(self, conn: AsyncConnection) -> dict[BudgetDimension, int]:
        c = self.claim
        return {b.dimension: b.settled + b.reserved
                for b in await budget.list_balances(conn, c.tenant_id, c.run_id, scope=c.step_id)}


__all__ = ["BudgetExhaustedError", "SliceLedger", "TurnHolds"]
