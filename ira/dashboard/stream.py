"""Server-sent events from a run's log: ``id:`` is the run_seq, so a reconnect resumes.

The log in SQL is the source; the stream polls it (a cheap indexed range read) rather than
trusting a broker fan-out, so a client that reconnects after any outage misses nothing.
Each frame is the read model's :class:`~ira.readmodel.events.EventView`, the same object the
JSON event list returns.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from datetime import timedelta

from ira.readmodel.events import event_view, sse_frame
from ira.runtime.store import runs
from ira.runtime.store.database import Database

POLL = timedelta(milliseconds=500)
KEEPALIVE = timedelta(seconds=15)


async def event_stream(
    db: Database, tenant_id: str, run_id: str, *, after: int, disconnected: Callable[[], object],
    poll: timedelta = POLL,
) -> AsyncIterator[str]:
    """Yield SSE frames for every event after ``after``, then new ones as they commit."""
    quiet = timedelta(0)
    while not await _maybe_await(disconnected()):
        async with db.reader() as conn:
            batch = await runs.list_events(conn, tenant_id, run_id, after=after, limit=200)
        for event in batch:
            after = event.run_seq
            yield sse_frame(event_view(event))
        quiet = timedelta(0) if batch else quiet + poll
        if quiet >= KEEPALIVE:
            quiet = timedelta(0)
            yield ": keep-alive\n\n"
        if not batch:
            await asyncio.sleep(poll.total_seconds())


async def _maybe_await(value: object) -> bool:
    if asyncio.iscoroutine(value):
        value = await value
    return bool(value)
