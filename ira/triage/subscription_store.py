"""The SQL of ``incident_updates``: each active run's subscription (:mod:`ira.triage.coalesce`).

Two writers race on a row: the triage consumer that folds follow-ups into it and the sweeper
that sends the folds that became due. Both read the row (PostgreSQL: ``FOR UPDATE``, the
sweeper ``SKIP LOCKED`` so it never waits behind a consumer's batch) and write it with a
compare-and-set on ``version``; a first row is an insert against the primary key. A loser
raises ConcurrentUpdateError: the consumer re-applies its events one by one, the sweeper
tries again on its next tick.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import bindparam, func, select, update
from sqlalchemy.engine import Row
from sqlalchemy.ext.asyncio import AsyncConnection

from ira.core.errors import ConcurrentUpdateError
from ira.triage.coalesce import Subscription
from ira.triage.tables import incident_updates

RunRef = tuple[str, str]
"""(tenant_id, run_id)"""

_u = incident_updates.c
_MUTABLE = ("version", "seq", "changes", "due_at", "sent_at", "sent_severity", "sent_resolved", "flips",
            "flips_since", "updated_at")
_CHANGE = (update(incident_updates)
           .where(_u.tenant_id == bindparam("b_tenant_id"), _u.run_id == bindparam("b_run_id"),
                  _u.version == bindparam("b_read_version"))
           .values({name: bindparam(f"b_{name}") for name in _MUTABLE}))


def _subscription(row: Row[Any]) -> Subscription:
    return Subscription.model_validate(dict(row._mapping))


async def read(conn: AsyncConnection, refs: Sequence[RunRef]) -> dict[RunRef, Subscription]:
    """The stored subscriptions of ``refs``, locked until the transaction ends (PostgreSQL)."""
    wanted = set(refs)
    if not wanted:
        return {}
    query = (select(incident_updates)
             .where(_u.tenant_id.in_({t for t, _ in wanted}), _u.run_id.in_({r for _, r in wanted}))
             .order_by(_u.tenant_id, _u.run_id).with_for_update())
    found = {(row.tenant_id, row.run_id): _subscription(row) for row in await conn.execute(query)}
    return {ref: sub for ref, sub in found.items() if ref in wanted}


async def write(conn: AsyncConnection, subs: Sequence[tuple[Subscription, int]]) -> None:
    """Store each ``(subscription, version read)``: an insert for version 0, else a compare-and-set."""
    new = [sub.model_copy(update={"version": 1}) for sub, read_version in subs if read_version == 0]
    if new:
        await conn.execute(incident_updates.insert(), [_row(sub) for sub in new])
    for sub, read_version in sorted((s for s in subs if s[1]), key=lambda s: (s[0].tenant_id, s[0].run_id)):
        values = {f"b_{name}": value for name, value in _row(sub).items() if name in _MUTABLE}
        values.update(b_version=read_version + 1, b_tenant_id=sub.tenant_id, b_run_id=sub.run_id,
                      b_read_version=read_version)
        if (await conn.execute(_CHANGE, values)).rowcount != 1:
            raise ConcurrentUpdateError(f"subscription of run {sub.run_id} moved past version {read_version}")


def _row(sub: Subscription) -> dict[str, Any]:
    row = sub.model_dump()
    row["changes"] = sub.changes.model_dump(mode="json") if sub.changes is not None else None
    return row


async def due(conn: AsyncConnection, *, now: datetime, limit: int) -> list[Subscription]:
    """Subscriptions whose pending changes are due, oldest first, across tenants (a sweep, like
    closing quiet incidents); rows a consumer holds are skipped, not waited for."""
    query = (select(incident_updates).where(_u.due_at <= now).order_by(_u.due_at).limit(limit)
             .with_for_update(skip_locked=True))
    return [_subscription(row) for row in await conn.execute(query)]


async def next_due(conn: AsyncConnection) -> datetime | None:
    """When the earliest pending fold is due (None: nothing waits): read without the write lock."""
    return (await conn.execute(select(func.min(_u.due_at)))).scalar_one_or_none()
