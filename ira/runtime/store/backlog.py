"""What is waiting, and since when: approvals for a person, Operations whose outcome nobody
knows, deliveries not yet answered. Each is a queue that no consumer lag shows (it waits in
SQL, not on a topic), so the scanner reads their sizes and oldest ages for ``/metrics``."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Select, func, select
from sqlalchemy.ext.asyncio import AsyncConnection

from ira.core.model import Model
from ira.runtime.store.schema import (
    APPROVAL_PENDING,
    DELIVERY_PENDING,
    OPERATION_UNKNOWN,
    approvals,
    deliveries,
    operations,
)


class Queue(Model):
    count: int = 0
    oldest_age: timedelta = timedelta(0)


class Backlog(Model):
    approvals_waiting: Queue = Queue()
    operations_unknown: Queue = Queue()
    """Operations in UNKNOWN: bytes may have left, the outcome is not confirmed either way."""
    deliveries_pending: Queue = Queue()


async def read_backlog(conn: AsyncConnection, *, now: datetime) -> Backlog:
    """Every tenant's queues (the operator's view, not a tenant's): three aggregates, each read
    from a partial index over just the waiting rows (``ix_approvals_pending`` ...), so a scan
    costs the size of the queue, not of the table's history."""
    return Backlog(approvals_waiting=await _queue(conn, _APPROVALS, now=now),
                   operations_unknown=await _queue(conn, _OPERATIONS, now=now),
                   deliveries_pending=await _queue(conn, _DELIVERIES, now=now))


def queue_query(since: Any, waiting: Any) -> Select[tuple[int, Any]]:
    """How many rows match ``waiting`` and the oldest ``since`` among them."""
    return select(func.count(), func.min(since)).where(waiting)


_APPROVALS = queue_query(approvals.c.created_at, APPROVAL_PENDING)
_OPERATIONS = queue_query(operations.c.updated_at, OPERATION_UNKNOWN)
_DELIVERIES = queue_query(deliveries.c.created_at, DELIVERY_PENDING)
"""Built once: read every scanner pass, and on PostgreSQL only a statement that comes back runs
on a prepared statement (``pg_fast``); built per call the three cost ~3x the CPU."""


async def _queue(conn: AsyncConnection, query: Select[tuple[int, Any]], *, now: datetime) -> Queue:
    count, oldest = (await conn.execute(query)).one()
    if not count or oldest is None:
        return Queue()
    if oldest.tzinfo is None:  # SQLite hands back naive datetimes
        oldest = oldest.replace(tzinfo=now.tzinfo)
    return Queue(count=int(count), oldest_age=max(now - oldest, timedelta(0)))
