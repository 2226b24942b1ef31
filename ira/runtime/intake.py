"""Step intake: how claimable steps reach a role's dispatcher, at most ``size`` at a time.

Two doors lead in. The broker's: wake-ups on ``ira.steps.v1``, which the relay publishes
after the outbox row committed; a full intake makes that consumer wait (backpressure). And
eager dispatch (Temporal's name for it): a transaction of *this* process that writes a step
wake-up for a kind this role handles hands the step over right after its commit, so a step
pays the store, not the relay's poll and a broker round trip. The eager door never waits.

Taken in the transaction (``take``, ``taken``): while the transaction writes the wake-up, a
free slot is reserved for it, the step is claimed in that same transaction (one write
transaction per step fewer: the commit that readies a step also hands it to its worker), and
the wake-up gets no outbox row at all (it had one written as sent until 2026-12-07: nothing read
it, and it cost an insert into a table of five indexes per step). A new run's READY steps
are not even claimed: the run's transaction takes their wake-ups before it inserts them, and
inserts the taken ones already claimed (``claimed_at_insert``: RUNNING, this process's lease,
epoch 1, the attempt started), saving a claim UPDATE of a row it just wrote per step. Nothing
else needs the wake-up's copy, because it is a hint for a claim that is already decided when
the commit stands:

* the step's only readers are the processes of its role, all racing for one claim. If the
  claim in the transaction won, the step is RUNNING under this process's lease: another
  process's copy would be a refused claim (after a relay batch and a broker hop). If it lost,
  no process could have won it then either (the step is held or finished, or the run is
  closed for claims; the scanner wakes a READY step that nobody woke since, whoever made it so).
  Other roles ignore the kind; timers are not step wake-ups.
* if the step then cannot run here (this process dies after the commit, the intake drains
  before the step starts, the commit's outcome is unknown), it is RUNNING under a lease that
  expires, and the scanner wakes it again from the steps table (``steps.find_wakeable``):
  durability never depended on the broker's copy, only the latency of recovering from a
  crash does (a lease instead of the relay's next poll).

Taken beyond the slots (``backlog``): a wake-up written while every slot is busy is taken and
its step claimed in the transaction all the same, up to ``backlog`` such steps at once; after
the commit it waits in a local queue (claimed, under this process's lease) and starts in the
first slot that frees, before any broker wake-up waiting for one. A burst of commits (200
approvals at once) then costs no relay pass, broker hop and second claim transaction per step
beyond the slots. A queued step whose lease ran out before a slot freed is not started (the
scanner wakes it from the steps table, as for a crash); a drained intake drops its queue alike.

Taken after the commit (``committed``): a wake-up written while every slot was busy and the
backlog full is relayed as before; if a slot is free by the time its transaction commits, the step starts
here anyway, and the broker's later copy is dropped by message id, without touching the
store (an in-memory inbox, bounded: a wake-up is a hint and the claim is the real dedupe, so
forgetting an old id costs one refused claim, never a second run of a step).

Run here (``run_here``): the transaction that readied and claimed a step may go on to finish it
itself, under that claim, before it commits (the coordinator's ``complete`` after the ticket's
receipt): the step then costs no transaction of its own, and after the commit the intake starts
nothing for it. If that transaction rolls back, nothing of it stands: the claim is gone with it.
"""

from __future__ import annotations

import asyncio
import contextvars
import dataclasses
import logging
from collections import OrderedDict, deque
from collections.abc import Coroutine, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy.ext.asyncio import AsyncConnection

from ira.core.commit import OutboxMessage
from ira.core.envelope import Envelope
from ira.core.run import Claim, Run, Step
from ira.runtime import runtrace
from ira.runtime.dispatch import StepContext, StepDispatcher
from ira.runtime.store.database import Database, taken_wakeup
from ira.runtime.wakeup import STEP_READY

log = logging.getLogger(__name__)
AFTER_CLAIMED_INSERT = "intake.after_claimed_insert"
"""Fault point: a commit that inserted steps claimed by this process (a run's start) committed /
their handlers start (``ira.runtime.fault``)."""


@dataclass
class _Slot:
    """The slot a step's task runs in. Its step may hand it on once, to a step its own
    finishing commit readies (:meth:`StepIntake.take`)."""

    intake: StepIntake
    handed_on: bool = False


_SLOT: contextvars.ContextVar[_Slot | None] = contextvars.ContextVar("ira_intake_slot", default=None)


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
    unpublished: int = 0
    """Eager steps whose wake-up was taken in its transaction, so never published."""
    queued: int = 0
    """Of those, steps taken while every slot was busy: they waited in the local queue."""
    expired_in_queue: int = 0
    """Queued steps whose lease ran out before a slot freed: left to the scanner."""
    ran_here: int = 0
    """Taken steps finished by the transaction that claimed them (``run_here``): none started."""


@dataclass
class StepIntake:
    """Runs the steps woken for ``dispatcher``'s kinds, each in its own task, ``size`` at once."""

    dispatcher: StepDispatcher
    size: int
    backlog: int = 256
    """Steps taken in their transaction beyond the ``size`` slots, at most, waiting for a slot
    (claimed: each must start well within its lease; a few hundred steps of a few ms each do)."""
    remember: int = 10_000
    """Eager message ids kept to drop their broker copies (a few seconds' worth under load)."""
    stats: IntakeStats = field(default_factory=IntakeStats)
    _busy: int = 0
    _waiting: int = 0
    _freed: asyncio.Event = field(default_factory=asyncio.Event)
    _running: set[asyncio.Task[None]] = field(default_factory=set)
    _eager_ids: OrderedDict[str, None] = field(default_factory=OrderedDict)
    _taken: dict[str, bool] = field(default_factory=dict)
    """Wake-ups taken in a transaction that has not ended yet: True if a slot was reserved for
    it, False if it goes to the queue (counted in ``_queued``)."""
    _queue: deque[tuple[StepContext | None, Envelope]] = field(default_factory=deque)
    """Steps claimed in a committed transaction, waiting for a slot (oldest first)."""
    _queued: int = 0
    """Taken beyond the slots and not started yet: in the queue or in their transaction."""
    _claimed: dict[str, StepContext | None] = field(default_factory=dict)
    """Their claims, made in that transaction (None: the step was not free)."""
    _inserted: set[str] = field(default_factory=set)
    """Those of them whose steps were inserted claimed (:meth:`claimed_at_insert`)."""
    _here: set[str] = field(default_factory=set)
    """Those of them the claiming transaction runs itself (:func:`run_here`): nothing to start."""
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
        self._busy += 1
        self._run_in_slot(self.dispatcher.handle_wakeup(envelope), envelope, contextvars.copy_context())

    def take(self, message: OutboxMessage) -> str | None:
        """While a transaction writes ``message``: reserve a slot to run its step after the
        commit, and name this process as the one that does (the wake-up then gets no outbox row).
        With every slot busy, the step is taken for the queue (``backlog``).

        A full intake still takes the step when the transaction is a step's of this intake
        that has not handed its slot on yet: the step's task ends right after its commit, so
        the run goes on in the slot it frees (one over ``size`` for that moment) instead of
        queueing behind the broker's wake-ups, each a relay pass and a broker hop later. Started
        runs finish before new ones start, and the wake-ups waiting get the slots runs end."""
        if not self.handles(message.envelope) or self._closed:
            return None
        if self._free() or self._hand_on():
            self._busy += 1
            self._taken[message.envelope.message_id] = True
        elif self._queued < self.backlog:
            self._queued += 1
            self._taken[message.envelope.message_id] = False
        else:
            return None
        return self.dispatcher.owner

    async def taken(self, conn: AsyncConnection, message: OutboxMessage) -> None:
        """Claim the taken step in the transaction that readied it: one write transaction
        fewer per step, and the step is RUNNING under this process's lease from the commit on."""
        self._claimed[message.envelope.message_id] = await self.dispatcher.claim_in(
            conn, message.envelope, in_trace=True)

    def lease_at_insert(self, message: OutboxMessage) -> datetime | None:
        """A taken step a new run inserts READY goes in claimed by this process instead
        (``store.database.ClaimsAtInsert``), leased as :meth:`taken`'s claim would be."""
        return self.dispatcher.clock.now() + self.dispatcher.lease

    def claimed_at_insert(self, message: OutboxMessage, claim: Claim, step: Step, run: Run) -> None:
        """The taken step went in claimed: no claim, no read; its handler starts after the commit."""
        self._claimed[message.envelope.message_id] = StepContext(claim=claim, step=step, run=run)
        self._inserted.add(message.envelope.message_id)

    def claimed_at_promotion(self, message: OutboxMessage, claim: Claim, step: Step, run: Run) -> None:
        """The taken step was claimed as its commit readied it (``folded_cas``): no claim
        statement, no read; its handler starts after the commit, as :meth:`taken`'s would."""
        self._claimed[message.envelope.message_id] = StepContext(claim=claim, step=step, run=run)
        self.dispatcher.claimed_in_commit(message.envelope, claim)

    def abandoned(self, messages: Sequence[OutboxMessage]) -> None:
        """The transaction that wrote these taken wake-ups did not commit: free their slots."""
        for message in messages:
            slot = self._taken.pop(message.envelope.message_id, None)
            if slot is not None:
                self._claimed.pop(message.envelope.message_id, None)
                self._inserted.discard(message.envelope.message_id)
                self._here.discard(message.envelope.message_id)
                self._give_back(slot)

    def committed(self, messages: Sequence[OutboxMessage]) -> None:
        """The eager door (a commit listener): start what this role handles, if a slot is free."""
        for message in messages:
            envelope = message.envelope
            slot = self._taken.pop(envelope.message_id, None)
            if slot is not None:
                claimed = self._claimed.pop(envelope.message_id, None)
                if envelope.message_id in self._here:  # finished in the transaction that claimed it
                    self._here.discard(envelope.message_id)
                    self.stats.ran_here += 1
                    self._give_back(slot)
                    continue
                if envelope.message_id in self._inserted:
                    self._inserted.discard(envelope.message_id)
                    self.dispatcher.faults.hit(AFTER_CLAIMED_INSERT)  # committed RUNNING, not started
                if self._closed:  # drained meanwhile: the lease expires, the scanner wakes the step again
                    self._give_back(slot)
                    continue
                self.stats.eager += 1
                self.stats.unpublished += 1
                if slot:
                    self._run_in_slot(self.dispatcher.run_claimed(claimed), envelope,
                                      runtrace.task_context(envelope.traceparent))
                else:
                    self.stats.queued += 1
                    self._queue.append((claimed, envelope))
                    self._start_queued()
                continue
            if not self.handles(envelope) or self._closed:
                continue
            if not self._free():  # the broker's door was first in line
                self.stats.eager_skipped += 1
                continue
            self._eager_ids[envelope.message_id] = None
            while len(self._eager_ids) > self.remember:
                self._eager_ids.popitem(last=False)
            self.stats.eager += 1
            self._busy += 1
            self._begin(envelope)

    def _carry(self, message: OutboxMessage, carried: object) -> None:
        claimed = self._claimed.get(message.envelope.message_id)
        if claimed is None:
            raise LookupError(f"the step of wake-up {message.envelope.message_id} was not claimed here")
        self._claimed[message.envelope.message_id] = dataclasses.replace(claimed, carried=carried)

    def _run_here(self, message: OutboxMessage) -> StepContext | None:
        claimed = self._claimed.get(message.envelope.message_id)
        if claimed is not None:
            self._here.add(message.envelope.message_id)
        return claimed

    def _free(self) -> bool:
        return self._busy < self.size and not self._waiting

    def _hand_on(self) -> bool:
        """Whether the calling task runs in a slot of this intake it may hand on (once)."""
        slot = _SLOT.get()
        if slot is None or slot.intake is not self or slot.handed_on:
            return False
        slot.handed_on = True
        return True

    def _begin(self, envelope: Envelope) -> None:
        # the trace the wake-up carries, as its broker copy would: not the committing span's
        self._run_in_slot(self.dispatcher.handle_wakeup(envelope), envelope,
                          runtrace.task_context(envelope.traceparent))

    @contextmanager
    def eager(self, db: Database) -> Iterator[None]:
        """Take steps from this process's own commits on ``db`` while the block runs."""
        with db.listening(self):
            yield

    def _run_in_slot(self, work: Coroutine[Any, Any, None], envelope: Envelope, context: contextvars.Context
                     ) -> None:
        """Run the step's ``work`` in a slot already counted in ``_busy``."""
        task = asyncio.get_running_loop().create_task(self._run(work, envelope), context=context)
        self._running.add(task)
        task.add_done_callback(self._running.discard)

    async def _run(self, work: Coroutine[Any, Any, None], envelope: Envelope) -> None:
        _SLOT.set(_Slot(self))  # this task's own context: the step's transactions see their slot
        try:
            await work
        except Exception:  # a worker task: the step stays in SQL and the scanner wakes it again
            log.exception("step %s/%s could not be handled", envelope.payload.get("run_id"),
                          envelope.payload.get("step_id"))
        finally:
            self._release_slot()

    def _give_back(self, slot: bool) -> None:
        """A taken wake-up will not run here: free its slot, or its place in the backlog."""
        if slot:
            self._release_slot()
        else:
            self._queued -= 1

    def _release_slot(self) -> None:
        self._busy -= 1
        self._start_queued()
        self._freed.set()

    def _start_queued(self) -> None:
        """Start queued steps in the free slots: they are claimed already, so they go before the
        broker's waiting wake-ups (whose claims may not even win)."""
        if not self._queue:
            return
        now = self.dispatcher.clock.now()
        while self._queue and self._busy < self.size and not self._closed:
            claimed, envelope = self._queue.popleft()
            self._queued -= 1
            if claimed is not None and claimed.claim.lease_until <= now:
                self.stats.expired_in_queue += 1  # another process may hold it by now
                continue
            self._busy += 1
            self._run_in_slot(self.dispatcher.run_claimed(claimed), envelope,
                              runtrace.task_context(envelope.traceparent))

    async def drain(self, grace: timedelta = timedelta(0)) -> None:
        """Stop taking steps; give running ones ``grace`` to finish, then cancel them (their
        leases expire and another worker takes over)."""
        self._closed = True
        self._queued -= len(self._queue)  # claimed, not started: their leases expire, the scanner wakes them
        self._queue.clear()
        if self._running and grace > timedelta(0):
            await asyncio.wait(set(self._running), timeout=grace.total_seconds())
        for task in list(self._running):
            task.cancel()
        if self._running:
            await asyncio.wait(set(self._running), timeout=5)


def run_here(conn: AsyncConnection, tenant_id: str, run_id: str, step_id: str) -> StepContext | None:
    """The claim of this step, if a :class:`StepIntake` of this process took its wake-up and
    claimed it in ``conn``'s transaction so far: the caller then finishes the step in this same
    transaction, under that claim, instead of the intake starting its handler after the commit
    (one write transaction fewer). None: no such claim (no intake took it, or the step was not
    free); the step goes its usual way.

    The caller must finish the step (a fenced commit that takes it out of RUNNING, which ends
    its attempt) or let the transaction roll back: a claim taken over here and left RUNNING
    is started by nobody until its lease runs out and the scanner wakes it."""
    taken = _taken_by_intake(conn, tenant_id, run_id, step_id)
    return taken[0]._run_here(taken[1]) if taken is not None else None


def claimed_here(conn: AsyncConnection, tenant_id: str, run_id: str, step_id: str) -> StepContext | None:
    """The claim of this step, if a :class:`StepIntake` of this process took its wake-up and
    claimed it in ``conn``'s transaction so far, and will start its handler after the commit as
    usual (unlike :func:`run_here`). The caller may do the step's first part in this transaction,
    under that claim, and hand what it did to the handler (:func:`carry`); if the transaction
    rolls back, neither the claim nor what it carried stands. None: no such claim."""
    taken = _taken_by_intake(conn, tenant_id, run_id, step_id)
    return taken[0]._claimed.get(taken[1].envelope.message_id) if taken is not None else None


def carry(conn: AsyncConnection, ctx: StepContext, carried: object) -> None:
    """Give the handler of ``ctx``'s step (claimed in ``conn``'s transaction: :func:`claimed_here`)
    ``carried`` as ``StepContext.carried`` when the intake starts it after the commit."""
    c = ctx.claim
    taken = _taken_by_intake(conn, c.tenant_id, c.run_id, c.step_id)
    if taken is None:
        raise LookupError(f"step {c.step_id} of run {c.run_id} was not claimed in this transaction")
    taken[0]._carry(taken[1], carried)


def _taken_by_intake(conn: AsyncConnection, tenant_id: str, run_id: str, step_id: str
                     ) -> tuple[StepIntake, OutboxMessage] | None:
    """The intake of this process that took this step's wake-up in ``conn``'s transaction, and that wake-up."""
    taken = taken_wakeup(conn, tenant_id, run_id, step_id)
    return (taken[0], taken[1]) if taken is not None and isinstance(taken[0], StepIntake) else None
