"""Records taken out of their partition, kept in SQL: parked (tried again later) or dead-lettered.

A consumer parks a record whose transient failure outlasted ``consumer.max_hold`` and moves
on; its re-drive loop claims due rows here (a lease written into ``due_at``, compare-and-set,
so replicas of one consumer never try one row at once), tries them again and removes them once
they have an outcome. A dead-lettered record is kept here as well as published to the DLQ
topic: the embedded broker forgets its topics on restart, the store is the authority.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from enum import StrEnum

from sqlalchemy import bindparam, delete, func, select, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncConnection

from ira.core.model import Model
from ira.runtime.store.schema import parked_records

REASON_MAX = 1000


class ParkedState(StrEnum):
    PARKED = "parked"
    DEAD_LETTERED = "dead_lettered"


class ParkedRecord(Model):
    """One record as it was consumed, plus how often it failed and why (last time)."""

    tenant_id: str
    consumer: str
    message_id: str
    topic: str
    partition: int
    offset: int
    timestamp_ms: int
    key: bytes | None
    value: bytes
    headers: dict[str, str]
    attempts: int
    """Failed tries so far (in place and from here)."""
    error_code: str
    reason: str
    id: int = 0
    """The row's id once stored (0 before)."""
    state: ParkedState = ParkedState.PARKED
    due_at: datetime | None = None
    """When it is tried next (also its claim: a claim moves it a lease ahead)."""


class ParkSummary(Model):
    """One consumer's rows, for ``/metrics``."""

    parked: int = 0
    oldest_parked_age: timedelta = timedelta(0)
    dead_lettered: int = 0


def _row(record: ParkedRecord, state: ParkedState, *, at: datetime, due_at: datetime) -> dict[str, object]:
    return {"tenant_id": record.tenant_id, "consumer": record.consumer, "message_id": record.message_id,
            "state": state.value, "topic": record.topic, "record_partition": record.partition,
            "record_offset": record.offset, "record_timestamp_ms": record.timestamp_ms, "key": record.key,
            "value": record.value, "headers": record.headers, "attempts": record.attempts,
            "error_code": record.error_code, "reason": _clean(record.reason), "parked_at": at, "due_at": due_at}


def _clean(reason: str) -> str:
    """A reason PostgreSQL can hold: no NUL (an error may quote the value it refused), bounded."""
    return reason.replace("\x00", "\\0")[:REASON_MAX]


def _insert(conn: AsyncConnection):  # type: ignore[no-untyped-def]
    return (postgresql if conn.dialect.name == "postgresql" else sqlite).insert(parked_records)


async def park(conn: AsyncConnection, record: ParkedRecord, *, at: datetime, due_at: datetime) -> None:
    """Keep ``record`` to be tried again from ``due_at``; parking it twice (a redelivery) is a no-op."""
    await conn.execute(_insert(conn).on_conflict_do_nothing(),
                       [_row(record, ParkedState.PARKED, at=at, due_at=due_at)])


async def keep_dead_letter(conn: AsyncConnection, record: ParkedRecord, *, at: datetime) -> None:
    """Keep ``record`` as refused for good; a parked row of it becomes the dead letter."""
    statement = _insert(conn)
    await conn.execute(statement.on_conflict_do_update(
        index_elements=["tenant_id", "consumer", "message_id"],
        set_={"state": ParkedState.DEAD_LETTERED.value, "attempts": statement.excluded.attempts,
              "error_code": statement.excluded.error_code, "reason": statement.excluded.reason}),
        [_row(record, ParkedState.DEAD_LETTERED, at=at, due_at=at)])


_c = parked_records.c
_DUE = select(parked_records).where(_c.consumer == bindparam("consumer"), _c.state == ParkedState.PARKED.value,
                                    _c.due_at <= bindparam("now")).order_by(_c.due_at).limit(bindparam("limit"))
"""Every consumer's re-drive poll, built once: on PostgreSQL only a statement that comes back
runs on a prepared statement (``pg_fast``); built per call it cost ~4x the CPU."""


async def find_due(conn: AsyncConnection, consumer: str, *, now: datetime, limit: int) -> list[ParkedRecord]:
    """Parked rows of ``consumer`` due by ``now``, oldest due first (a read: most polls find none)."""
    rows = (await conn.execute(_DUE, {"consumer": consumer, "now": now, "limit": limit})).mappings().all()
    return [_record(row) for row in rows]


async def claim(conn: AsyncConnection, record: ParkedRecord, *, now: datetime, lease: timedelta) -> bool:
    """Take ``record`` for ``lease`` unless another replica took it since it was read."""
    c = parked_records.c
    won = await conn.execute(update(parked_records).where(c.id == record.id, c.due_at == record.due_at)
                             .values(due_at=now + lease))
    return won.rowcount == 1


def _record(row: object) -> ParkedRecord:
    r = dict(row)  # type: ignore[call-overload]
    return ParkedRecord(
        id=r["id"], tenant_id=r["tenant_id"], consumer=r["consumer"], message_id=r["message_id"], topic=r["topic"],
        partition=r["record_partition"], offset=r["record_offset"], timestamp_ms=r["record_timestamp_ms"],
        key=r["key"], value=r["value"], headers=r["headers"], attempts=r["attempts"], error_code=r["error_code"],
        reason=r["reason"], state=ParkedState(r["state"]), due_at=r["due_at"])


async def reschedule(
    conn: AsyncConnection, record_id: int, *, attempts: int, due_at: datetime, error_code: str, reason: str
) -> None:
    """Another failed try of a parked row: count it, say why, and when to try next."""
    c = parked_records.c
    await conn.execute(update(parked_records).where(c.id == record_id, c.state == ParkedState.PARKED.value)
                       .values(attempts=attempts, due_at=due_at, error_code=error_code, reason=_clean(reason)))


async def unpark(conn: AsyncConnection, record_id: int) -> None:
    """The parked row has its outcome (applied, a duplicate, ...): it leaves the park.
    A row that became a dead letter meanwhile stays."""
    c = parked_records.c
    await conn.execute(delete(parked_records).where(c.id == record_id, c.state == ParkedState.PARKED.value))


async def summarize(conn: AsyncConnection, consumer: str, *, now: datetime) -> ParkSummary:
    """How many rows of ``consumer`` are parked (and the oldest's age) and dead-lettered."""
    rows = (await conn.execute(_SUMMARY, {"consumer": consumer})).all()
    found = {state: (int(count), oldest) for state, count, oldest in rows}
    parked, oldest = found.get(ParkedState.PARKED.value, (0, None))
    return ParkSummary(parked=parked, oldest_parked_age=_age(oldest, now),
                       dead_lettered=found.get(ParkedState.DEAD_LETTERED.value, (0, None))[0])


_SUMMARY = select(parked_records.c.state, func.count(), func.min(parked_records.c.parked_at)).where(
    parked_records.c.consumer == bindparam("consumer")).group_by(parked_records.c.state)
"""Built once: every consumer reads it with its re-drive poll (every ``consumer.park_poll``)."""


def _age(oldest: datetime | None, now: datetime) -> timedelta:
    if oldest is None:
        return timedelta(0)
    if oldest.tzinfo is None:  # an aggregate over SQLite hands back a naive datetime
        oldest = oldest.replace(tzinfo=now.tzinfo)
    return max(now - oldest, timedelta(0))


async def parked_of(conn: AsyncConnection, consumer: str) -> Sequence[ParkedRecord]:
    """Every row of ``consumer`` (both states), oldest first: for operators and tests."""
    c = parked_records.c
    rows = (await conn.execute(select(parked_records).where(c.consumer == consumer).order_by(c.id))).mappings().all()
    return [_record(row) for row in rows]

