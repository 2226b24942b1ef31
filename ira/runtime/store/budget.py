"""The budget ledger: reserve before a call, settle with the real usage, release the rest.

``available = limit - settled - reserved``. A reservation is one conditional UPDATE, so
concurrent reservations can never overspend: under PostgreSQL the row lock serializes them
and the condition is re-checked on the newest row; SQLite serializes writers outright.
Branches draw *slices*: a slice is a reservation on the root account that becomes the limit
of a child account. Nothing can raise a limit, so a child can never widen the root.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime

from sqlalchemy import and_, insert, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncConnection

from ira.core.budget import ROOT_SCOPE, BudgetBalance, BudgetDimension, Reservation
from ira.core.errors import BudgetExhaustedError, NotFoundError
from ira.runtime.store.schema import budget_accounts, budget_reservations

_acc = budget_accounts.c
_res = budget_reservations.c


def _account(tenant_id: str, run_id: str, scope: str, dimension: BudgetDimension):  # type: ignore[no-untyped-def]
    return and_(_acc.tenant_id == tenant_id, _acc.run_id == run_id, _acc.scope == scope,
                _acc.dimension == dimension)


async def open_account(
    conn: AsyncConnection, tenant_id: str, run_id: str, limits: Mapping[BudgetDimension, int],
    *, scope: str = ROOT_SCOPE, parent_reservations: Mapping[BudgetDimension, str] | None = None,
) -> None:
    """Create an account with one row per dimension (the root at run creation, or a slice)."""
    parents = parent_reservations or {}
    await conn.execute(insert(budget_accounts), [
        {"tenant_id": tenant_id, "run_id": run_id, "scope": scope, "dimension": dim, "limit_amount": limit,
         "reserved": 0, "settled": 0, "parent_reservation_id": parents.get(dim)}
        for dim, limit in limits.items()
    ])


async def reserve(
    conn: AsyncConnection, tenant_id: str, run_id: str, dimension: BudgetDimension, amount: int,
    *, reservation_id: str, at: datetime, scope: str = ROOT_SCOPE,
) -> Reservation:
    """Hold ``amount``; idempotent on ``reservation_id``; BudgetExhaustedError if it does not fit."""
    if amount < 0:
        raise ValueError("a reservation cannot be negative")
    try:
        async with conn.begin_nested():
            await conn.execute(insert(budget_reservations).values(
                tenant_id=tenant_id, reservation_id=reservation_id, run_id=run_id, scope=scope,
                dimension=dimension, amount=amount, state="reserved", created_at=at))
    except IntegrityError:
        return await get_reservation(conn, tenant_id, reservation_id)
    fits = _acc.limit_amount - _acc.settled - _acc.reserved >= amount
    result = await conn.execute(update(budget_accounts).where(_account(tenant_id, run_id, scope, dimension), fits)
                                .values(reserved=_acc.reserved + amount))
    if result.rowcount != 1:
        balance = await get_balance(conn, tenant_id, run_id, dimension, scope=scope)
        raise BudgetExhaustedError(dimension.value, amount, balance.available)
    return await get_reservation(conn, tenant_id, reservation_id)


async def settle(
    conn: AsyncConnection, tenant_id: str, reservation_id: str, *, used: int, at: datetime, state: str = "settled"
) -> Reservation:
    """Charge the real usage and free the rest of the hold; a second settle changes nothing.

    Usage above the reservation is still charged: the cost was real (retries, re-samples).
    """
    row = (await conn.execute(
        update(budget_reservations)
        .where(_res.tenant_id == tenant_id, _res.reservation_id == reservation_id, _res.state == "reserved")
        .values(state=state, used=used, closed_at=at)
        .returning(_res.run_id, _res.scope, _res.dimension, _res.amount)
    )).first()
    if row is not None:
        await conn.execute(update(budget_accounts).where(_account(tenant_id, row.run_id, row.scope, row.dimension))
                           .values(reserved=_acc.reserved - row.amount, settled=_acc.settled + used))
    return await get_reservation(conn, tenant_id, reservation_id)


async def release(conn: AsyncConnection, tenant_id: str, reservation_id: str, *, at: datetime) -> Reservation:
    """Return the whole hold unused (the call never happened)."""
    return await settle(conn, tenant_id, reservation_id, used=0, at=at, state="released")


async def open_slice(
    conn: AsyncConnection, tenant_id: str, run_id: str, scope: str, limits: Mapping[BudgetDimension, int],
    *, at: datetime,
) -> None:
    """Give a branch its own account, funded by reservations on the root (idempotent)."""
    existing = await list_balances(conn, tenant_id, run_id, scope=scope)
    if existing:
        return
    parents = {}
    for dim, amount in limits.items():
        rid = f"slice:{run_id}:{scope}:{dim.value}"  # reservation ids are unique per tenant, not per run
        await reserve(conn, tenant_id, run_id, dim, amount, reservation_id=rid, at=at)
        parents[dim] = rid
    await open_account(conn, tenant_id, run_id, limits, scope=scope, parent_reservations=parents)


async def close_slice(conn: AsyncConnection, tenant_id: str, run_id: str, scope: str, *, at: datetime) -> None:
    """Settle the slice on the root with what the branch used (holds still open count as used)."""
    rows = (await conn.execute(select(budget_accounts).where(
        _acc.tenant_id == tenant_id, _acc.run_id == run_id, _acc.scope == scope))).all()
    for row in rows:
        if row.parent_reservation_id:
            await settle(conn, tenant_id, row.parent_reservation_id, used=row.settled + row.reserved, at=at)


async def get_reservation(conn: AsyncConnection, tenant_id: str, reservation_id: str) -> Reservation:
    row = (await conn.execute(select(budget_reservations).where(
        _res.tenant_id == tenant_id, _res.reservation_id == reservation_id))).first()
    if row is None:
        raise NotFoundError(f"reservation {reservation_id} not found")
    m = row._mapping
    return Reservation(reservation_id=m["reservation_id"], tenant_id=m["tenant_id"], run_id=m["run_id"],
                       scope=m["scope"], dimension=m["dimension"], amount=m["amount"], state=m["state"],
                       used=m["used"])


async def get_balance(
    conn: AsyncConnection, tenant_id: str, run_id: str, dimension: BudgetDimension, *, scope: str = ROOT_SCOPE
) -> BudgetBalance:
    row = (await conn.execute(select(budget_accounts).where(_account(tenant_id, run_id, scope, dimension)))).first()
    if row is None:
        raise NotFoundError(f"no {dimension.value} budget for run {run_id} scope {scope}")
    return BudgetBalance(dimension=dimension, limit=row.limit_amount, reserved=row.reserved, settled=row.settled)


async def list_balances(
    conn: AsyncConnection, tenant_id: str, run_id: str, *, scope: str = ROOT_SCOPE
) -> list[BudgetBalance]:
    rows = (await conn.execute(select(budget_accounts).where(
        _acc.tenant_id == tenant_id, _acc.run_id == run_id, _acc.scope == scope).order_by(_acc.dimension))).all()
    return [BudgetBalance(dimension=r.dimension, limit=r.limit_amount, reserved=r.reserved, settled=r.settled)
            for r in rows]
