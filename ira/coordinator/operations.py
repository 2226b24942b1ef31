"""SQL for Operations, the ledger of external business actions (C4/C5).

An Operation's fact only moves along ``OPERATION_TRANSITIONS``, each move a compare-and-set
on the fact it was read in. Facts are recorded whoever observes them (a late receipt after a
cancel is still the truth); what an observer may *do next* is fenced separately, by the
step's epoch in the run commit.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from functools import cache
from typing import Any

from sqlalchemy import bindparam, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncConnection
from sqlalchemy.sql import Update

from ira.core.errors import NotFoundError
from ira.core.operation import Operation
from ira.core.states import OPERATION_TRANSITIONS, OperationFact, OperationHandling
from ira.core.ticket import Ticket
from ira.runtime.store.new_rows import InsertNew
from ira.runtime.store.schema import operations

_op = operations.c
IN_DOUBT = (OperationFact.SUBMITTED, OperationFact.UNKNOWN)
"""Facts that say "bytes may have left, the outcome is not known yet"."""


def _model(row: Any) -> Operation:
    return Operation.model_validate({k: v for k, v in row._mapping.items() if k != "deadline_at"})


async def record_intent(conn: AsyncConnection, op: Operation, *, submitted_until: datetime | None = None
                        ) -> Operation:
    """C4, first half: the intent with its stable key; the same key again returns the first (as
    it stands). One statement (``ON CONFLICT DO NOTHING RETURNING``), no savepoint: a conflict is
    read, not caught. ``submitted_until``: the intent is written already SUBMITTED (the caller's
    transaction also holds its permit), with this deadline; ``op`` is returned as given either way."""
    row = {**op.model_dump(), "deadline_at": submitted_until}
    if submitted_until is not None:
        row["fact_state"] = OperationFact.SUBMITTED
    written = (await conn.execute(_INSERT_INTENT.on(conn), row)).first()
    if written is not None:
        return op
    existing = await find_by_key(conn, op.tenant_id, op.idempotency_key)
    if existing is None:  # the conflict was on the operation id: a programming error, not a twin
        raise IntegrityError("INSERT INTO operations", None, ValueError(f"operation {op.operation_id} exists"))
    return existing


_INSERT_INTENT = InsertNew(operations, _op.operation_id)


async def find_by_key(conn: AsyncConnection, tenant_id: str, key: str) -> Operation | None:
    row = (await conn.execute(_BY_KEY, {"k_tenant": tenant_id, "k_key": key})).first()
    return _model(row) if row else None


async def get_operation(conn: AsyncConnection, tenant_id: str, operation_id: str) -> Operation:
    row = (await conn.execute(_GET, {"k_tenant": tenant_id, "k_operation": operation_id})).first()
    if row is None:
        raise NotFoundError(f"operation {operation_id} not found")
    return _model(row)


async def for_step(conn: AsyncConnection, tenant_id: str, run_id: str, *, step_id: str) -> Operation | None:
    """The step's newest Operation (a run has one create_ticket Operation per draft)."""
    row = (await conn.execute(_FOR_STEP, {"k_tenant": tenant_id, "k_run": run_id, "k_step": step_id})).first()
    return _model(row) if row else None


async def list_operations(conn: AsyncConnection, tenant_id: str, run_id: str) -> list[Operation]:
    rows = await conn.execute(_OF_RUN, {"k_tenant": tenant_id, "k_run": run_id})
    return [_model(r) for r in rows]


# Reads built once with bound parameters (see ira/runtime/store/steps.py on why).
_TENANT = _op.tenant_id == bindparam("k_tenant")
_BY_KEY = select(operations).where(_TENANT, _op.idempotency_key == bindparam("k_key"))
_GET = select(operations).where(_TENANT, _op.operation_id == bindparam("k_operation"))
_FOR_STEP = select(operations).where(_TENANT, _op.run_id == bindparam("k_run"), _op.step_id == bindparam("k_step")) \
    .order_by(_op.created_at.desc()).limit(1)
_OF_RUN = select(operations).where(_TENANT, _op.run_id == bindparam("k_run")).order_by(_op.created_at)


async def move(
    conn: AsyncConnection, op: Operation, *, to: OperationFact | None = None, at: datetime,
    handling: OperationHandling | None = None, external_ref: str | None = None, owner_epoch: int | None = None,
    approval_id: str | None = None, deadline_at: datetime | None = None,
    from_facts: Sequence[OperationFact] | None = None, receipt: Ticket | None = None, error: str | None = None,
) -> bool:
    """Compare-and-set on the fact ``op`` was read in (or ``from_facts``); False if it moved."""
    sources = tuple(from_facts or (op.fact_state,))
    if to is not None:
        sources = tuple(s for s in sources if to in OPERATION_TRANSITIONS[s] or s == to)
    values: dict[str, Any] = {"updated_at": at}
    for name, value in (("fact_state", to), ("handling_state", handling), ("external_ref", external_ref),
                        ("owner_epoch", owner_epoch), ("approval_id", approval_id), ("deadline_at", deadline_at),
                        ("error", error[:1000] if error else None)):
        if value is not None:
            values[name] = value
    if receipt is not None:
        values |= {"external_ref": receipt.key, "external_system": receipt.system, "external_url": receipt.url}
    params = {f"v_{name}": value for name, value in values.items()}
    result = await conn.execute(_move_statement(tuple(sorted(values)), sources), {
        "k_tenant": op.tenant_id, "k_operation": op.operation_id, **params})
    return result.rowcount == 1


@cache
def _move_statement(columns: tuple[str, ...], sources: tuple[OperationFact, ...]) -> Update:
    """The compare-and-set UPDATE of :func:`move`, built once per set of columns it writes and of
    source facts: building it with literal values on every call cost ~0.25 ms of CPU (micro-benchmark
    on the 2-core machine), and the sources as an expanding parameter (a list the caller passes)
    still sent each execution through SQLAlchemy's compile path on SQLite (sqlite_fast.py)."""
    return update(operations).where(_TENANT, _op.operation_id == bindparam("k_operation"),
                                    _op.fact_state.in_(sources)) \
        .values({name: bindparam(f"v_{name}", type_=_op[name].type) for name in columns})


async def in_doubt_for_run(conn: AsyncConnection, tenant_id: str, run_id: str) -> list[Operation]:
    rows = await conn.execute(select(operations).where(
        _op.tenant_id == tenant_id, _op.run_id == run_id, _op.fact_state.in_(IN_DOUBT)))
    return [_model(r) for r in rows]
