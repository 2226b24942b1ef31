"""The budget ledger: reserve before a call, settle with the real usage, release the rest.

``available = limit - settled - reserved``. A reservation is one conditional UPDATE, so
concurrent reservations can never overspend: under PostgreSQL the row lock serializes them
and the condition is re-checked on the newest row; SQLite serializes writers outright.
Branches draw *slices*: a slice is a reservation on the root account that becomes the limit
of a child account. Nothing can raise a limit, so a child can never widen the root.

Every write is ``INSERT .. ON CONFLICT DO NOTHING RETURNING`` or ``UPDATE .. RETURNING``
(no savepoint, no read back): each statement costs a SQLAlchemy execution and, on SQLite, a
thread hop, and a run's budget writes were a third of the statements it issued. On
PostgreSQL each call that writes both tables is one statement (data-modifying CTEs): a
statement is a round trip there, and a branch closes its slice, and a step is charged, while
the run's row lock is held, which the run's other branches queue on. There a step's charge and
a branch's slice close may also wait for the run's next commit in the transaction and be
written by its compare-and-set (``charge_with_commit``, ``close_slice_with_commit``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import ClassVar

from sqlalchemy import BigInteger, String, and_, bindparam, column, exists, func, insert, literal, select, update
from sqlalchemy.dialects import postgresql
from sqlalchemy.ext.asyncio import AsyncConnection
from sqlalchemy.sql import Select, Update
from sqlalchemy.sql.expression import CTE, ColumnElement

from ira.core.budget import ROOT_SCOPE, BudgetBalance, BudgetDimension, Reservation
from ira.core.errors import BudgetExhaustedError, NotFoundError
from ira.runtime.store.database import before_commit, kept_by_transaction
from ira.runtime.store.new_rows import InsertNew
from ira.runtime.store.pg_fast import write_later
from ira.runtime.store.schema import budget_accounts, budget_reservations

_acc = budget_accounts.c
_res = budget_reservations.c


def _account(tenant_id: str, run_id: str, scope: str, dimension: BudgetDimension):  # type: ignore[no-untyped-def]
    return and_(_acc.tenant_id == tenant_id, _acc.run_id == run_id, _acc.scope == scope,
                _acc.dimension == dimension)


# Prebuilt statements (see steps.py on why).
_ACCOUNT_KEY = and_(_acc.tenant_id == bindparam("k_tenant"), _acc.run_id == bindparam("k_run"),
                    _acc.scope == bindparam("k_scope"), _acc.dimension == bindparam("k_dim"))
_AMOUNT = bindparam("n_amount", type_=BigInteger)
_HOLD = update(budget_accounts).where(_ACCOUNT_KEY, _acc.limit_amount - _acc.settled - _acc.reserved >= _AMOUNT) \
    .values(reserved=_acc.reserved + _AMOUNT)
_CHARGE = update(budget_accounts).where(_ACCOUNT_KEY, _acc.limit_amount - _acc.settled - _acc.reserved >= _AMOUNT) \
    .values(settled=_acc.settled + _AMOUNT)
_UNHOLD = update(budget_accounts).where(_ACCOUNT_KEY).values(
    reserved=_acc.reserved - _AMOUNT, settled=_acc.settled + bindparam("n_used", type_=BigInteger))
_INSERT_RESERVATIONS = InsertNew(budget_reservations, _res.reservation_id)
_INSERT_ACCOUNTS = insert(budget_accounts)
_SETTLE = update(budget_reservations).where(
    _res.tenant_id == bindparam("k_tenant"), _res.reservation_id == bindparam("k_rid"), _res.state == "reserved",
).values(state=bindparam("n_state"), used=bindparam("n_used", type_=BigInteger), closed_at=bindparam("n_at")) \
    .returning(_res.run_id, _res.scope, _res.dimension, _res.amount)
_slice = budget_accounts.alias("slice")
_OF_SLICE = and_(_slice.c.tenant_id == bindparam("k_tenant"), _slice.c.run_id == bindparam("k_run"),
                 _slice.c.scope == bindparam("k_scope"))
_CLOSE_SLICE = update(budget_reservations).where(
    _res.tenant_id == bindparam("k_tenant"), _res.state == "reserved",
    _res.reservation_id.in_(select(_slice.c.parent_reservation_id).where(_OF_SLICE)),
).values(state="settled", closed_at=bindparam("n_at"), used=select(_slice.c.settled + _slice.c.reserved).where(
    _OF_SLICE, _slice.c.parent_reservation_id == _res.reservation_id).scalar_subquery()) \
    .returning(_res.run_id, _res.scope, _res.dimension, _res.amount, _res.used)
"""Settles every parent reservation of a slice with what the slice used (settled + still held)."""
_funded = func.unnest(
    bindparam("r_ids", type_=postgresql.ARRAY(String)), bindparam("r_dims", type_=postgresql.ARRAY(String)),
    bindparam("r_amounts", type_=postgresql.ARRAY(BigInteger)), bindparam("r_scopes", type_=postgresql.ARRAY(String)),
).table_valued(column("reservation_id", String), column("dimension", String), column("amount", BigInteger),
               column("scope", String)).render_derived(name="funded")
"""PostgreSQL: ``open_slices``' rows as arrays, one element per slice and dimension."""


def _open_slices_pg() -> Select[tuple[str, int]]:
    """PostgreSQL: all of ``open_slices`` in one statement (one round trip instead of one per
    dimension and two more): the root reservations not there yet (rows as arrays), one
    conditional hold of the root per dimension for their total, the accounts of the slices
    funded now; answers the dimensions whose total the root could not hold (dimension, total).
    Data-modifying CTEs run once each, whatever the outer query reads; a row answered makes
    the caller raise, which rolls the statement back with its transaction."""
    fund = postgresql.insert(budget_reservations).from_select(
        ["tenant_id", "reservation_id", "run_id", "scope", "dimension", "amount", "state", "created_at"],
        select(bindparam("k_tenant", type_=String), _funded.c.reservation_id, bindparam("k_run", type_=String),
               literal(ROOT_SCOPE, String), _funded.c.dimension, _funded.c.amount, literal("reserved", String),
               bindparam("n_at", type_=_res.created_at.type)),
    ).on_conflict_do_nothing().returning(_res.reservation_id, _res.dimension, _res.amount).cte("funded_rows")
    totals = select(fund.c.dimension, func.sum(fund.c.amount).label("total")) \
        .group_by(fund.c.dimension).cte("totals")
    held = update(budget_accounts).where(
        _acc.tenant_id == bindparam("k_tenant"), _acc.run_id == bindparam("k_run"), _acc.scope == ROOT_SCOPE,
        _acc.dimension == totals.c.dimension, _acc.limit_amount - _acc.settled - _acc.reserved >= totals.c.total,
    ).values(reserved=_acc.reserved + totals.c.total).returning(_acc.dimension).cte("held")
    scopes = _funded.alias("scopes")
    accounts = postgresql.insert(budget_accounts).from_select(
        ["tenant_id", "run_id", "scope", "dimension", "limit_amount", "reserved", "settled", "parent_reservation_id"],
        select(bindparam("k_tenant", type_=String), bindparam("k_run", type_=String), scopes.c.scope,
               fund.c.dimension, fund.c.amount, literal(0, BigInteger), literal(0, BigInteger), fund.c.reservation_id)
        .select_from(fund.join(scopes, scopes.c.reservation_id == fund.c.reservation_id)),
    ).returning(_acc.scope).cte("slice_accounts")
    return select(totals.c.dimension, totals.c.total).where(totals.c.dimension.not_in(select(held.c.dimension))) \
        .add_cte(accounts).order_by(totals.c.dimension).limit(1)


_OPEN_SLICES_PG = _open_slices_pg()


def _charging(gate: CTE | None = None) -> tuple[CTE, CTE]:
    """PostgreSQL: ``charge``'s writes as CTEs: the reservation written settled if it is new, and
    the account charged only then and only if the amount fits. ``gate``: only if that CTE (the
    run's compare-and-set, ``folded_cas``) has a row."""
    values = select(bindparam("k_tenant", type_=String), bindparam("k_rid", type_=String),
                    bindparam("k_run", type_=String), bindparam("k_scope", type_=String),
                    bindparam("k_dim", type_=String), _AMOUNT, literal("settled", String), _AMOUNT,
                    bindparam("n_at", type_=_res.created_at.type), bindparam("n_at", type_=_res.closed_at.type))
    written = postgresql.insert(budget_reservations).from_select(
        ["tenant_id", "reservation_id", "run_id", "scope", "dimension", "amount", "state", "used", "created_at",
         "closed_at"], values if gate is None else values.where(exists(select(gate.c.run_id))),
    ).on_conflict_do_nothing().returning(_res.reservation_id).cte("charged_reservation")
    charged = update(budget_accounts).where(
        _ACCOUNT_KEY, _acc.limit_amount - _acc.settled - _acc.reserved >= _AMOUNT,
        exists(select(written.c.reservation_id)),
    ).values(settled=_acc.settled + _AMOUNT).returning(_acc.dimension).cte("charged_account")
    return written, charged


def _charge_pg() -> Select[tuple[int, int]]:
    """PostgreSQL: ``charge`` in one statement (``_charging``); answers (inserted, charged)."""
    written, charged = _charging()
    return select(select(func.count()).select_from(written).scalar_subquery().label("inserted"),
                  select(func.count()).select_from(charged).scalar_subquery().label("charged"))


_CHARGE_PG = _charge_pg()


def _close_slice_pg(gate: CTE | None = None) -> Update:
    """PostgreSQL: ``close_slice`` in one statement: the slice's parent reservations settled
    (``_CLOSE_SLICE``) and their holds moved from reserved to settled on the root, summed per
    account (an UPDATE .. FROM applies one source row per target row). ``gate``: only if that
    CTE (the run's compare-and-set, ``folded_cas``) has a row."""
    closing = _CLOSE_SLICE if gate is None else _CLOSE_SLICE.where(exists(select(gate.c.run_id)))
    closed = closing.cte("closed_parents")
    per_account = select(closed.c.run_id, closed.c.scope, closed.c.dimension,
                         func.sum(closed.c.amount).label("amount"), func.sum(closed.c.used).label("used")) \
        .group_by(closed.c.run_id, closed.c.scope, closed.c.dimension).cte("closed_holds")
    return update(budget_accounts).where(
        _acc.tenant_id == bindparam("k_tenant"), _acc.run_id == per_account.c.run_id,
        _acc.scope == per_account.c.scope, _acc.dimension == per_account.c.dimension,
    ).values(reserved=_acc.reserved - per_account.c.amount, settled=_acc.settled + per_account.c.used)


_CLOSE_SLICE_PG = _close_slice_pg()


async def open_account(
    conn: AsyncConnection, tenant_id: str, run_id: str, limits: Mapping[BudgetDimension, int],
    *, scope: str = ROOT_SCOPE, parent_reservations: Mapping[BudgetDimension, str] | None = None,
) -> None:
    """Create an account with one row per dimension (the root at run creation, or a slice)."""
    await send_waiting(conn)
    parents = parent_reservations or {}
    await write_later(conn, _INSERT_ACCOUNTS, [
        {"tenant_id": tenant_id, "run_id": run_id, "scope": scope, "dimension": dim, "limit_amount": limit,
         "reserved": 0, "settled": 0, "parent_reservation_id": parents.get(dim)}
        for dim, limit in limits.items()
    ])


async def _insert_reservations(conn: AsyncConnection, rows: list[dict[str, object]]) -> set[str]:
    """Insert the reservations not there yet; the ids of those inserted (the others are retries)."""
    if not rows:
        return set()
    result = await conn.execute(_INSERT_RESERVATIONS.on(conn), rows)
    return {r.reservation_id for r in result}


def _reservation_row(tenant_id: str, run_id: str, scope: str, dimension: BudgetDimension, amount: int, *,
                     reservation_id: str, at: datetime, used: int | None = None) -> dict[str, object]:
    return {"tenant_id": tenant_id, "reservation_id": reservation_id, "run_id": run_id, "scope": scope,
            "dimension": dimension, "amount": amount, "state": "reserved" if used is None else "settled",
            "used": used, "created_at": at, "closed_at": None if used is None else at}


async def _draw(conn: AsyncConnection, statement: Update, tenant_id: str, run_id: str, scope: str,
                dimension: BudgetDimension, amount: int) -> None:
    """Apply a conditional hold or charge; BudgetExhaustedError if ``amount`` does not fit."""
    result = await conn.execute(statement, {
        "k_tenant": tenant_id, "k_run": run_id, "k_scope": scope, "k_dim": dimension, "n_amount": amount})
    if result.rowcount != 1:
        balance = await get_balance(conn, tenant_id, run_id, dimension, scope=scope)
        raise BudgetExhaustedError(dimension.value, amount, balance.available)


async def reserve(
    conn: AsyncConnection, tenant_id: str, run_id: str, dimension: BudgetDimension, amount: int,
    *, reservation_id: str, at: datetime, scope: str = ROOT_SCOPE,
) -> Reservation:
    """Hold ``amount``; idempotent on ``reservation_id``; BudgetExhaustedError if it does not fit."""
    if amount < 0:
        raise ValueError("a reservation cannot be negative")
    await send_waiting(conn)
    row = _reservation_row(tenant_id, run_id, scope, dimension, amount, reservation_id=reservation_id, at=at)
    if not await _insert_reservations(conn, [row]):
        return await get_reservation(conn, tenant_id, reservation_id)
    await _draw(conn, _HOLD, tenant_id, run_id, scope, dimension, amount)
    return Reservation(reservation_id=reservation_id, tenant_id=tenant_id, run_id=run_id, scope=scope,
                       dimension=dimension, amount=amount, state="reserved")


async def charge(
    conn: AsyncConnection, tenant_id: str, run_id: str, dimension: BudgetDimension, amount: int,
    *, reservation_id: str, at: datetime, scope: str = ROOT_SCOPE,
) -> None:
    """``reserve`` then ``settle`` with ``used=amount`` in two statements instead of four (one on
    PostgreSQL, ``_CHARGE_PG``): the reservation is written settled and the account charged only
    if it fits. Idempotent on ``reservation_id`` (a repeat changes nothing); BudgetExhaustedError
    if it does not fit."""
    if amount < 0:
        raise ValueError("a charge cannot be negative")
    await send_waiting(conn)
    await _charge(conn, tenant_id, run_id, dimension, amount, reservation_id=reservation_id, at=at, scope=scope)


async def _charge(conn: AsyncConnection, tenant_id: str, run_id: str, dimension: BudgetDimension, amount: int,
                  *, reservation_id: str, at: datetime, scope: str) -> None:
    if conn.dialect.name == "postgresql":
        outcome = (await conn.execute(_CHARGE_PG, {
            "k_tenant": tenant_id, "k_rid": reservation_id, "k_run": run_id, "k_scope": scope, "k_dim": dimension,
            "n_amount": amount, "n_at": at})).one()
        if outcome.inserted and not outcome.charged:  # did not fit: the caller's rollback takes the reservation back
            balance = await get_balance(conn, tenant_id, run_id, dimension, scope=scope)
            raise BudgetExhaustedError(dimension.value, amount, balance.available)
        return
    row = _reservation_row(tenant_id, run_id, scope, dimension, amount, reservation_id=reservation_id, at=at,
                           used=amount)
    if await _insert_reservations(conn, [row]):
        await _draw(conn, _CHARGE, tenant_id, run_id, scope, dimension, amount)


async def settle(
    conn: AsyncConnection, tenant_id: str, reservation_id: str, *, used: int, at: datetime, state: str = "settled"
) -> Reservation:
    """Charge the real usage and free the rest of the hold; a second settle changes nothing.

    Usage above the reservation is still charged: the cost was real (retries, re-samples).
    """
    await send_waiting(conn)
    row = (await conn.execute(_SETTLE, {"k_tenant": tenant_id, "k_rid": reservation_id, "n_state": state,
                                        "n_used": used, "n_at": at})).first()
    if row is None:
        return await get_reservation(conn, tenant_id, reservation_id)
    await _unhold(conn, tenant_id, [(row.run_id, row.scope, row.dimension, row.amount, used)])
    return Reservation(reservation_id=reservation_id, tenant_id=tenant_id, run_id=row.run_id, scope=row.scope,
                       dimension=row.dimension, amount=row.amount, state=state, used=used)


async def _unhold(conn: AsyncConnection, tenant_id: str, closed: list[tuple[str, str, str, int, int]]) -> None:
    """Move closed holds ``(run, scope, dimension, amount, used)`` from reserved to settled."""
    if closed:
        await conn.execute(_UNHOLD, [{"k_tenant": tenant_id, "k_run": run_id, "k_scope": scope, "k_dim": dim,
                                      "n_amount": amount, "n_used": used}
                                     for run_id, scope, dim, amount, used in closed])


async def release(conn: AsyncConnection, tenant_id: str, reservation_id: str, *, at: datetime) -> Reservation:
    """Return the whole hold unused (the call never happened)."""
    return await settle(conn, tenant_id, reservation_id, used=0, at=at, state="released")


async def open_slice(
    conn: AsyncConnection, tenant_id: str, run_id: str, scope: str, limits: Mapping[BudgetDimension, int],
    *, at: datetime,
) -> None:
    """Give a branch its own account, funded by reservations on the root (idempotent)."""
    await open_slices(conn, tenant_id, run_id, {scope: limits}, at=at)


async def open_slices(
    conn: AsyncConnection, tenant_id: str, run_id: str, slices: Mapping[str, Mapping[BudgetDimension, int]],
    *, at: datetime,
) -> None:
    """``open_slice`` for several branches at once: one INSERT of the root reservations, one
    conditional UPDATE of the root per dimension for their total, one INSERT of the accounts
    (on PostgreSQL all three in one statement, ``_OPEN_SLICES_PG``). Idempotent per slice
    dimension: its reservation id is deterministic and written with its account, so a dimension
    already funded is skipped. BudgetExhaustedError if the root can't hold them all."""
    await send_waiting(conn)
    wanted = {(scope, dim): f"slice:{run_id}:{scope}:{dim.value}"  # reservation ids are unique per tenant
              for scope, limits in slices.items() for dim in limits}
    if conn.dialect.name == "postgresql":
        row = (await conn.execute(_OPEN_SLICES_PG, {
            "k_tenant": tenant_id, "k_run": run_id, "n_at": at, "r_ids": list(wanted.values()),
            "r_dims": [dim.value for _, dim in wanted], "r_amounts": [slices[scope][dim] for scope, dim in wanted],
            "r_scopes": [scope for scope, _ in wanted]})).first()
        if row is not None:  # a dimension whose total did not fit: the statement's writes roll back
            balance = await get_balance(conn, tenant_id, run_id, BudgetDimension(row.dimension))
            raise BudgetExhaustedError(row.dimension, int(row.total), balance.available)
        return
    new = await _insert_reservations(conn, [
        _reservation_row(tenant_id, run_id, ROOT_SCOPE, dim, slices[scope][dim], reservation_id=rid, at=at)
        for (scope, dim), rid in wanted.items()])
    funded = {(scope, dim): rid for (scope, dim), rid in wanted.items() if rid in new}
    totals: dict[BudgetDimension, int] = {}
    for scope, dim in funded:
        totals[dim] = totals.get(dim, 0) + slices[scope][dim]
    for dim, total in totals.items():
        await _draw(conn, _HOLD, tenant_id, run_id, ROOT_SCOPE, dim, total)
    if funded:
        await conn.execute(_INSERT_ACCOUNTS, [
            {"tenant_id": tenant_id, "run_id": run_id, "scope": scope, "dimension": dim,
             "limit_amount": slices[scope][dim], "reserved": 0, "settled": 0, "parent_reservation_id": rid}
            for (scope, dim), rid in funded.items()])


async def close_slice(conn: AsyncConnection, tenant_id: str, run_id: str, scope: str, *, at: datetime) -> None:
    """Settle the slice on the root with what the branch used (holds still open count as used).
    On PostgreSQL one statement (``_CLOSE_SLICE_PG``): a branch makes this call while it holds
    its run's row lock, which its run's other branches queue on."""
    await send_waiting(conn)
    await _close_slice(conn, tenant_id, run_id, scope, at=at)


async def _close_slice(conn: AsyncConnection, tenant_id: str, run_id: str, scope: str, *, at: datetime) -> None:
    params = {"k_tenant": tenant_id, "k_run": run_id, "k_scope": scope, "n_at": at}
    if conn.dialect.name == "postgresql":
        await conn.execute(_CLOSE_SLICE_PG, params)
        return
    rows = (await conn.execute(_CLOSE_SLICE, params)).all()
    await _unhold(conn, tenant_id, [(r.run_id, r.scope, r.dimension, r.amount, r.used) for r in rows])


# Writes that ride in the run's compare-and-set (PostgreSQL) -----------------------------------


@dataclass(frozen=True, slots=True)
class WaitingCharge:
    """A ``charge`` waiting for its run's next commit in the transaction."""

    KIND: ClassVar[str] = "charge"
    tenant_id: str
    run_id: str
    dimension: BudgetDimension
    amount: int
    reservation_id: str
    at: datetime
    scope: str

    def params(self) -> dict[str, object]:
        return {"k_rid": self.reservation_id, "k_scope": self.scope, "k_dim": self.dimension,
                "n_amount": self.amount, "n_at": self.at}

    async def send(self, conn: AsyncConnection) -> None:
        await _charge(conn, self.tenant_id, self.run_id, self.dimension, self.amount,
                      reservation_id=self.reservation_id, at=self.at, scope=self.scope)

    async def check(self, conn: AsyncConnection, short: bool) -> None:
        """Raise as ``charge`` does if the commit that carried it found that it did not fit."""
        if short:
            balance = await get_balance(conn, self.tenant_id, self.run_id, self.dimension, scope=self.scope)
            raise BudgetExhaustedError(self.dimension.value, self.amount, balance.available)


@dataclass(frozen=True, slots=True)
class WaitingClose:
    """A ``close_slice`` waiting for its run's next commit in the transaction."""

    KIND: ClassVar[str] = "close_slice"
    tenant_id: str
    run_id: str
    scope: str
    at: datetime

    def params(self) -> dict[str, object]:
        return {"k_scope": self.scope, "n_at": self.at}

    async def send(self, conn: AsyncConnection) -> None:
        await _close_slice(conn, self.tenant_id, self.run_id, self.scope, at=self.at)

    async def check(self, conn: AsyncConnection, short: bool) -> None:
        """A slice's close always fits: it settles what the slice held."""


Waiting = WaitingCharge | WaitingClose
_WAITING = "ira.budget.waiting"
"""``database.kept_by_transaction`` key: the transaction's ledger writes waiting for a commit."""
CHARGE_SHORT = "charge_short"
"""The column of a commit that carried a charge: True if it did not fit (nothing was charged)."""


async def charge_with_commit(
    conn: AsyncConnection, tenant_id: str, run_id: str, dimension: BudgetDimension, amount: int,
    *, reservation_id: str, at: datetime, scope: str = ROOT_SCOPE,
) -> None:
    """``charge``, written by the next commit of the run in this transaction (``runs.commit``,
    its compare-and-set as ``folded_cas`` builds it), which raises BudgetExhaustedError if it did
    not fit; at once where it cannot wait (SQLite, outside a ``Database.transaction``)."""
    if amount < 0:
        raise ValueError("a charge cannot be negative")
    await _wait_or_send(conn, WaitingCharge(tenant_id, run_id, dimension, amount, reservation_id, at, scope))


async def close_slice_with_commit(conn: AsyncConnection, tenant_id: str, run_id: str, scope: str, *,
                                  at: datetime) -> None:
    """``close_slice``, written by the next commit of the run in this transaction, as
    :func:`charge_with_commit`."""
    await _wait_or_send(conn, WaitingClose(tenant_id, run_id, scope, at))


async def _wait_or_send(conn: AsyncConnection, write: Waiting) -> None:
    kept = kept_by_transaction(conn) if conn.dialect.name == "postgresql" else None
    if kept is None:
        await send_waiting(conn)
        await write.send(conn)
        return
    waiting: list[Waiting] | None = kept.get(_WAITING)
    if waiting is None:
        waiting = kept[_WAITING] = []
        before_commit(conn, lambda: send_waiting(conn))  # a transaction that made no such commit
    waiting.append(write)


async def send_waiting(conn: AsyncConnection) -> None:
    """The ledger writes still waiting in ``conn``'s transaction, each on its own, in order:
    before any other statement of the ledger (which would not see them) and before COMMIT."""
    kept = kept_by_transaction(conn)
    waiting: list[Waiting] | None = kept.get(_WAITING) if kept is not None else None
    while waiting:
        await waiting.pop(0).send(conn)


async def take_waiting(conn: AsyncConnection, tenant_id: str, run_id: str) -> Waiting | None:
    """The waiting write a commit of run ``run_id`` carries: the last one, if it is that run's;
    the others go out first, on their own (two writes of one account in one statement would
    apply one of them)."""
    kept = kept_by_transaction(conn)
    waiting: list[Waiting] | None = kept.get(_WAITING) if kept is not None else None
    if not waiting:
        return None
    last = waiting[-1]
    carried = waiting.pop() if (last.tenant_id, last.run_id) == (tenant_id, run_id) else None
    await send_waiting(conn)
    return carried


def carried_writes(kind: str, gate: CTE) -> tuple[list[CTE], ColumnElement[bool] | None]:
    """A waiting write of ``kind`` (its ``KIND``) as data-modifying CTEs of the statement whose ``gate`` CTE is
    the run's compare-and-set: they write only if it took the run's row, and after it, as the
    statement reads it first (the run's row before the budget's, every writer's lock order);
    and for a charge the ``CHARGE_SHORT`` column. Its parameters: ``Waiting.params``."""
    if kind == WaitingCharge.KIND:
        written, charged = _charging(gate)
        short = and_(exists(select(written.c.reservation_id)), ~exists(select(charged.c.dimension)))
        return [written, charged], short.label(CHARGE_SHORT)
    return [_close_slice_pg(gate).cte("closed_accounts")], None


async def get_reservation(conn: AsyncConnection, tenant_id: str, reservation_id: str) -> Reservation:
    await send_waiting(conn)
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
    await send_waiting(conn)
    row = (await conn.execute(select(budget_accounts).where(_account(tenant_id, run_id, scope, dimension)))).first()
    if row is None:
        raise NotFoundError(f"no {dimension.value} budget for run {run_id} scope {scope}")
    return BudgetBalance(dimension=dimension, limit=row.limit_amount, reserved=row.reserved, settled=row.settled)


async def list_balances(
    conn: AsyncConnection, tenant_id: str, run_id: str, *, scope: str = ROOT_SCOPE
) -> list[BudgetBalance]:
    await send_waiting(conn)
    rows = (await conn.execute(select(budget_accounts).where(
        _acc.tenant_id == tenant_id, _acc.run_id == run_id, _acc.scope == scope).order_by(_acc.dimension))).all()
    return [BudgetBalance(dimension=r.dimension, limit=r.limit_amount, reserved=r.reserved, settled=r.settled)
            for r in rows]
