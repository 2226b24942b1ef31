"""Sent is not applied: outbox rows whose consumer has not applied them, found and sent again.

A broker may acknowledge a record and then lose it (the embedded broker keeps records in
memory; a restarted Tansu drops what it had), and a consumer group may skip what it never
saw. So a row whose ``awaits`` names a consumer stays watched after the relay sent it: once
that consumer's inbox holds the row's message id (written in the transaction of its effect)
the watch ends; while it does not, ``after`` past the send, the row goes back to unsent and
the relay publishes it again, with the same id, key and headers, so the receiver's inbox
drops a copy that was only late. Each re-send doubles the wait before the next check (up to
``2**MAX_DOUBLINGS`` times ``after``), so a consumer that is merely behind is not flooded.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from datetime import UTC, datetime, timedelta

from sqlalchemy import bindparam, func, or_, select, tuple_, update
from sqlalchemy.ext.asyncio import AsyncConnection

from ira.runtime.store.schema import inbox, outbox

MAX_DOUBLINGS = 3
_o = outbox.c
_WATCHED = select(_o.id, _o.tenant_id, _o.message_id, _o.awaits, _o.resends, _o.topic).where(
    _o.awaits.is_not(None), _o.sent_at.is_not(None), _o.sent_at <= bindparam("sent_by"),
    or_(_o.check_at.is_(None), _o.check_at <= bindparam("now"))).order_by(_o.id).limit(bindparam("limit"))
_UNSENT = select(_o.topic, func.count(), func.min(_o.created_at)).where(_o.sent_at.is_(None)).group_by(_o.topic)
"""The scanner's reads, every pass, built once: on PostgreSQL only a statement that comes back
runs on a prepared statement (``pg_fast``); built per call each cost ~3x the CPU."""


async def any_to_settle(conn: AsyncConnection, *, now: datetime, after: timedelta) -> bool:
    """Whether ``resend_unapplied`` would find a row (the scanner asks a reader first)."""
    return (await conn.execute(_WATCHED, {"sent_by": now - after, "now": now, "limit": 1})).first() is not None


async def resend_unapplied(conn: AsyncConnection, *, now: datetime, after: timedelta, limit: int) -> Counter[str]:
    """Settle up to ``limit`` watched rows sent at least ``after`` ago: end the watch of those
    applied, put the others back to unsent. Returns how many were re-sent, per topic."""
    rows = (await conn.execute(_WATCHED, {"sent_by": now - after, "now": now, "limit": limit})).all()
    if not rows:
        return Counter()
    applied = await _applied(conn, [(r.tenant_id, r.awaits, r.message_id) for r in rows])
    done = [r.id for r in rows if (r.tenant_id, r.awaits, r.message_id) in applied]
    if done:
        await conn.execute(update(outbox).where(_o.id.in_(done)).values(awaits=None, check_at=None))
    by_resends: dict[int, list[int]] = defaultdict(list)
    resent: Counter[str] = Counter()
    for row in rows:
        if row.id not in done:
            by_resends[row.resends + 1].append(row.id)
            resent[row.topic] += 1
    for resends, ids in by_resends.items():
        await conn.execute(update(outbox).where(_o.id.in_(ids), _o.sent_at.is_not(None)).values(
            sent_at=None, claimed_until=None, resends=resends,
            check_at=now + after * 2 ** min(resends, MAX_DOUBLINGS)))
    return resent


async def _applied(conn: AsyncConnection, keys: list[tuple[str, str, str]]) -> set[tuple[str, str, str]]:
    """Which (tenant_id, consumer, message_id) the inboxes hold."""
    found = await conn.execute(select(inbox.c.tenant_id, inbox.c.consumer, inbox.c.message_id).where(
        tuple_(inbox.c.tenant_id, inbox.c.consumer, inbox.c.message_id).in_(keys)))
    return {(r.tenant_id, r.consumer, r.message_id) for r in found}


async def unsent_by_topic(conn: AsyncConnection, *, now: datetime) -> dict[str, tuple[int, timedelta]]:
    """Per topic: rows waiting for the relay, and how long the oldest has waited (the ingest
    outbox's depth and age are the ``ira.alerts.v1`` entry)."""
    found = await conn.execute(_UNSENT)
    return {topic: (count, now - _aware(oldest)) for topic, count, oldest in found}


def _aware(at: datetime) -> datetime:
    """Aggregate results bypass the column type on SQLite (naive UTC)."""
    return at.replace(tzinfo=UTC) if at.tzinfo is None else at
