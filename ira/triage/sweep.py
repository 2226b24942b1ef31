"""The sweeper of incident updates: sends the folds that became due without another follow-up.

A follow-up folded inside the interval waits in its run's subscription (``due_at``); if no
later follow-up's batch sends it, this loop does, every ``tick``. SQL is the authority: the
due folds are read, sent (outbox row) and cleared in one transaction, so a crash before the
commit leaves them due for the next tick and a crash after it leaves the outbox row for the
relay; the update's id (``run_id:seq``) makes a re-publish one inbox row at the coordinator.
"""

from __future__ import annotations

import asyncio
import logging
from datetime import timedelta

from sqlalchemy.exc import InterfaceError, OperationalError

from ira.core.clock import Clock
from ira.core.errors import TransientError
from ira.runtime.pause import pause
from ira.runtime.store.database import Database
from ira.runtime.store.outbox import enqueue
from ira.triage import store, subscription_store
from ira.triage.coalesce import sent, update_message

log = logging.getLogger(__name__)
SWEEP_LIMIT = 200
"""Subscriptions sent per transaction (a sweep after an outage sends the rest on the next ticks)."""


def tick_for(interval: timedelta) -> timedelta:
    """How often to look: a tenth of the interval, between 50 ms and 1 s, so a due update waits
    at most a small part of its interval."""
    return min(max(interval / 10, timedelta(milliseconds=50)), timedelta(seconds=1))


async def send_due_updates(db: Database, clock: Clock, *, environment: str, limit: int = SWEEP_LIMIT) -> int:
    """Send every due fold (up to ``limit``) in one transaction; returns how many went out. A
    read first (no write lock): most ticks find nothing due, and SQLite has one writer."""
    async with db.reader() as conn:
        earliest = await subscription_store.next_due(conn)
    first = store.aware(earliest)  # an aggregate comes back from SQLite naive or as text
    if first is None or first > clock.now():
        return 0
    async with db.transaction() as conn:
        now = clock.now()
        with store.conflicts_as_retries():
            due = await subscription_store.due(conn, now=now, limit=limit)
            if not due:
                return 0
            await subscription_store.write(conn, [(sent(sub, now=now), sub.version) for sub in due])
            await enqueue(conn, [update_message(sub, now, environment=environment) for sub in due], at=now)
    return len(due)


async def sweep_updates(db: Database, clock: Clock, *, interval: timedelta, environment: str,
                        stop: asyncio.Event) -> None:
    """Until stopped: send due updates every :func:`tick_for` ``interval``."""
    while not stop.is_set():
        try:
            await send_due_updates(db, clock, environment=environment)
        except (TransientError, OperationalError, InterfaceError) as exc:  # busy, away, or a consumer won the row
            log.warning("triage: sending due incident updates failed, trying again: %s", exc)
        await pause(stop, tick_for(interval).total_seconds())

