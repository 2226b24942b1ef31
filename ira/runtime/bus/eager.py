"""Eager hand-over of messages this process commits to a consumer of the same process.

Temporal calls it eager dispatch; :mod:`ira.runtime.intake` does it for step wake-ups. Here
it is for inbox consumers: a commit listener picks the messages a consumer wants (a run
request for the coordinator, a new group's first alert for triage) and applies each in its
own task through the consumer's inbox (:meth:`ConsumerRunner.apply_local`), right after the
commit, instead of after the relay's poll and a broker round trip. The outbox row is still
relayed: other processes hear of it, and if this one dies first, nothing is lost; the broker's
copy then finds the inbox row and is dropped. A failure, a busy hand-over (``size`` tasks
already running) or an older message of the same key still on its way (``guard``) leaves
the message to the broker: eager is only ever earlier, never different.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import timedelta

from sqlalchemy.ext.asyncio import AsyncConnection

from ira.core.commit import OutboxMessage
from ira.runtime import runtrace
from ira.runtime.bus.consumer import ConsumerRunner
from ira.runtime.bus.record import Outcome
from ira.runtime.store.database import Database

log = logging.getLogger(__name__)


@dataclass
class EagerStats:
    applied: int = 0
    """Applied right after this process's commit."""
    duplicate: int = 0
    """Local copies the broker's copy had already applied."""
    skipped: int = 0
    """Left to the broker: every slot was busy, or an older message of the key was on its way."""
    failed: int = 0
    """Rolled back (the broker's copy applies them)."""


@dataclass
class EagerInbox:
    """Applies the messages ``wants`` picks from this process's commits with ``consumer``."""

    consumer: ConsumerRunner
    wants: Callable[[OutboxMessage], bool]
    size: int = 8
    guard: Callable[[OutboxMessage], Awaitable[bool]] | None = None
    """True: an older message of the same key may be ahead; the broker's copy keeps the order."""
    stats: EagerStats = field(default_factory=EagerStats)
    _running: set[asyncio.Task[None]] = field(default_factory=set)

    def take(self, message: OutboxMessage) -> str | None:
        """Never taken in the transaction (a ``CommitListener``): its row is still relayed."""
        return None

    async def taken(self, conn: AsyncConnection, message: OutboxMessage) -> None:
        """Nothing is ever taken (:meth:`take`)."""

    def abandoned(self, messages: Sequence[OutboxMessage]) -> None:
        """Nothing is ever taken (:meth:`take`)."""

    def committed(self, messages: Sequence[OutboxMessage]) -> None:
        """Right after a commit: start applying the wanted messages it wrote."""
        for message in messages:
            if not self.wants(message):
                continue
            if len(self._running) >= self.size:
                self.stats.skipped += 1
                continue
            # the trace the message carries, as its broker copy would: not the committing span's
            task = asyncio.get_running_loop().create_task(
                self._apply(message), context=runtrace.task_context(message.envelope.traceparent))
            self._running.add(task)
            task.add_done_callback(self._running.discard)

    async def _apply(self, message: OutboxMessage) -> None:
        envelope = message.envelope
        try:
            if self.guard is not None and await self.guard(message):
                self.stats.skipped += 1
                return
            outcome = await self.consumer.apply_local(envelope, topic=message.topic, key=message.key)
        except Exception as exc:  # nothing was kept: the broker's copy applies the message
            self.stats.failed += 1
            log.info("%s: %s left to the broker: %r", self.consumer.name, envelope.message_id, exc)
            return
        if outcome == Outcome.DUPLICATE:
            self.stats.duplicate += 1
        else:
            self.stats.applied += 1

    @contextmanager
    def listening(self, db: Database) -> Iterator[None]:
        """Take messages from this process's commits on ``db`` while the block runs."""
        with db.listening(self):
            yield

    async def drain(self, grace: timedelta) -> None:
        """Give running hand-overs ``grace``, then cancel them (rolled back: the broker's copy applies)."""
        if self._running:
            await asyncio.wait(set(self._running), timeout=grace.total_seconds())
        for task in list(self._running):
            task.cancel()
