"""Step intake: how claimable steps reach a role's dispatcher, at most ``size`` at a time.

Two doors lead in. The broker's: wake-ups on ``ira.steps.v1``, which the relay publishes
after the outbox row committed; a full intake makes that consumer wait (backpressure). And
eager dispatch (Temporal's name for it): a transaction of *this* process that committed a
step wake-up for a kind this role handles hands the step over right after the commit, so a
step pays the store, not the relay's poll and a broker round trip. The outbox row is still
written and relayed: other processes hear of the step, and if this one dies before its
claim, the lease/scanner path still finds the step in SQL. The eager door never waits: with
no free slot (or a broker wake-up already waiting for one) it leaves the step to the broker's
copy.

The broker's copy of a wake-up that went in eagerly is dropped here, by message id, without
touching the store (an in-memory inbox, bounded: a wake-up is a hint and the claim is the
real dedupe, so forgetting an old id costs one refused claim, never a second run of a step).
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
from collections import OrderedDict
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import timedelta

from ira.core.commit import OutboxMessage
from ira.core.envelope import Envelope
from ira.runtime import runtrace
from ira.runtime.dispatch import StepDispatcher
from ira.runtime.store.database import Database
from ira.runtime.wakeup import STEP_READY

log = logging.getLogger(__name__)


@dataclass
class IntakeStats:
    eager: int = 0
    """Steps handed over right after a local commit."""
    relayed: int = 0
    """Steps that came through the broker."""
    deduped: int = 0
    """Broker copies of wake-ups that already went in eagerly."""
    eager_skipped: int = 0
    """Local wake-ups left to the broker because every slot was busy."""


@dataclass
class StepIntake:
    """Runs the steps woken for ``dispatcher``'s kinds, each in its own task, ``size`` at once."""

    dispatcher: StepDispatcher
    size: int
    remember: int = 10_000
    """Eager message ids kept to drop their broker copies (a few seconds' worth under load)."""
    stats: IntakeStats = field(default_factory=IntakeStats)
    _busy: int = 0
    _waiting: int = 0
    _freed: asyncio.Event = field(default_factory=asyncio.Event)
    _running: set[asyncio.Task[None]] = field(default_factory=set)
    _eager_ids: OrderedDict[str, None] = field(default_factory=OrderedDict)
    _closed: bool = False

    def handles(self, envelope: Envelope) -> bool:
        return envelope.type == STEP_READY and envelope.payload.get("kind") in self.dispatcher.handlers

    async def wakeup(self, envelope: Envelope, meta: object = None) -> None:
        """The broker's door (a consumer handler): waits for a free slot."""
        if not self.handles(envelope) or self._closed:
            return
        if envelope.message_id in self._eager_ids:
            del self._eager_ids[envelope.message_id]
            self.stats.deduped += 1
            return
        self._waiting += 1
        try:
            while self._busy >= self.size:
                self._freed.clear()
                await self._freed.wait()
        finally:
            self._waiting -= 1
        self.stats.relayed += 1
        self._start(envelope, contextvars.copy_context())

    def committed(self, messages: Sequence[OutboxMessage]) -> None:
        """The eager door (a commit listener): start what this role handles, if a slot is free."""
        for message in messages:
            envelope = message.envelope
            if not self.handles(envelope) or self._closed:
                continue
            if self._busy >= self.size or self._waiting:  # the broker's door was first in line
                self.stats.eager_skipped += 1
                continue
            self._eager_ids[envelope.message_id] = None
            while len(self._eager_ids) > self.remember:
                self._eager_ids.popitem(last=False)
            self.stats.eager += 1
            # the trace the wake-up carries, as its broker copy would: not the committing span's
            self._start(envelope, runtrace.task_context(envelope.traceparent))

    @contextmanager
    def eager(self, db: Database) -> Iterator[None]:
        """Take steps from this process's own commits on ``db`` while the block runs."""
        with db.listening(self.committed):
            yield

    def _start(self, envelope: Envelope, context: contextvars.Context) -> None:
        self._busy += 1
        task = asyncio.get_running_loop().create_task(self._run(envelope), context=context)
        self._running.add(task)
        task.add_done_callback(self._running.discard)

    async def _run(self, envelope: Envelope) -> None:
        try:
            await self.dispatcher.handle_wakeup(envelope)
        except Exception:  # a worker task: the step stays in SQL and the scanner wakes it again
            log.exception("step %s/%s could not be handled", envelope.payload.get("run_id"),
                          envelope.payload.get("step_id"))
        finally:
            self._busy -= 1
            self._freed.set()

    async def drain(self, grace: timedelta = timedelta(0)) -> None:
        """Stop taking steps; give running ones ``grace`` to finish, then cancel them (their
        leases expire and another worker takes over)."""
        self._closed = True
        if self._running and grace > timedelta(0):
            await asyncio.wait(set(self._running), timeout=grace.total_seconds())
        for task in list(self._running):
            task.cancel()
        if self._running:
            await asyncio.wait(set(self._running), timeout=5)
