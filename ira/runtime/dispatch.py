"""Step dispatch (C3): turn a wake-up into a claimed step and run its handler under a lease.

Wake-ups are hints, so this consumer needs no inbox: the claim is the dedupe. A handler
finishes its step by committing a RunCommit fenced with ``ctx.claim``; while it works, a
heartbeat renews the lease, and if the lease is lost (another worker took over with a higher
epoch) the handler is cancelled: it must not write anything more. A step costs two write
transactions when its handler's fenced commit finishes it: the claim, and that commit, which
also ends the attempt (``steps.end_attempt_in_commit``); only a handler that returns with its
step still RUNNING (or whose commit did not go through) costs a third, the release.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine, Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from opentelemetry.trace import SpanKind
from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncConnection

from ira.core.clock import Clock
from ira.core.commit import EventDraft, Fence, RunCommit, StepChange
from ira.core.envelope import Envelope
from ira.core.errors import ConcurrentUpdateError, StaleEpochError, TransientError
from ira.core.events import RunEventType
from ira.core.run import Claim, Run, Step
from ira.core.states import StepState
from ira.runtime import runtrace
from ira.runtime.fault import FaultPoints
from ira.runtime.store import runs, steps
from ira.runtime.store.database import Database
from ira.runtime.store.schema import attempts
from ira.runtime.wakeup import STEP_READY

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class StepContext:
    """What a handler gets: proof of ownership and the state it was claimed in."""

    claim: Claim
    step: Step
    run: Run
    carried: object | None = None
    """What the transaction that claimed the step already did of it (``intake.carry``), for the
    handler to go on from; None: nothing, the handler starts from the beginning."""


StepHandler = Callable[[StepContext], Coroutine[Any, Any, None]]


@dataclass
class DispatchStats:
    claimed: int = 0
    not_claimable: int = 0
    lost_lease: int = 0
    failed: int = 0


@dataclass
class StepDispatcher:
    db: Database
    clock: Clock
    handlers: Mapping[str, StepHandler]
    """Step kinds this process runs; wake-ups for other kinds belong to other roles."""
    owner: str
    lease: timedelta = timedelta(seconds=30)
    max_attempts: int = 3
    stats: DispatchStats = field(default_factory=DispatchStats)
    on_claim: Callable[[str], None] = lambda _result: None
    """Told "won", "lost" (someone else holds it, or it is finished) or "lease_lost" (telemetry)."""
    faults: FaultPoints = field(default_factory=FaultPoints)
    """Armed fault points (tests): ``intake.after_claimed_insert`` (``ira.runtime.intake``)."""

    async def handle_wakeup(self, envelope: Envelope) -> None:
        """Claim the woken step if it is ours and free; run it; never raise for a lost race."""
        if envelope.type != STEP_READY or envelope.payload.get("kind") not in self.handlers:
            return
        async with self.db.transaction() as conn:
            ctx = await self.claim_in(conn, envelope)
        await self.run_claimed(ctx)

    async def claim_in(self, conn: AsyncConnection, envelope: Envelope, *, in_trace: bool = False
                       ) -> StepContext | None:
        """Claim the step ``envelope`` wakes in the caller's transaction: None if it is not free.

        ``in_trace``: the span continues the wake-up's trace (a claim folded into the commit
        that readied the step, whose own span may be another trace's), not the current one.
        """
        tenant_id, run_id, step_id = envelope.tenant_id, envelope.payload["run_id"], envelope.payload["step_id"]
        parent = runtrace.context_of(envelope.traceparent) if in_trace else None
        with runtrace.tracer().start_as_current_span("claim step", context=parent, kind=SpanKind.CLIENT, attributes={
                "db.operation.name": "claim", "ira.run_id": run_id, "ira.step_id": step_id}) as span:
            claimed = await steps.claim_step_as(conn, tenant_id, run_id, step_id, owner=self.owner,
                                                lease=self.lease, now=self.clock.now())
            span.set_attribute("ira.claim.won", claimed is not None)
            if claimed is None:
                return None
            claim, step = claimed
            run = await runs.get_run(conn, tenant_id, run_id)
        return StepContext(claim=claim, step=step, run=run)

    def claimed_in_commit(self, envelope: Envelope, claim: Claim) -> None:
        """The span :meth:`claim_in` records, for a claim the store took in the commit that
        readied the step (``StepIntake.claimed_at_promotion``): the trace shows every claim."""
        with runtrace.tracer().start_as_current_span(
                "claim step", context=runtrace.context_of(envelope.traceparent), kind=SpanKind.CLIENT, attributes={
                    "db.operation.name": "claim", "ira.run_id": claim.run_id, "ira.step_id": claim.step_id,
                    "ira.claim.won": True}):
            pass

    async def run_claimed(self, ctx: StepContext | None) -> None:
        """Run the handler of a step :meth:`claim_in` claimed (and committed); count a lost one."""
        if ctx is None:
            self.stats.not_claimable += 1
            self.on_claim("lost")
            return
        self.stats.claimed += 1
        self.on_claim("won")
        await self._run_claimed(ctx)

    async def _run_claimed(self, ctx: StepContext) -> None:
        # The attempt is a span of the run's trace, however it was woken (a relayed wake-up, the
        # scanner's, a re-claim after a crash). The handler runs in the calling task (the
        # intake's slot task, or the consumer's), not a task of its own: most steps finish
        # within a few milliseconds, far before their lease's first renewal is due, so the
        # renewal is a timer that starts a task only once it is due (_Lease), and a lost lease
        # cancels this task, which takes the cancellation back here (Task.uncancel).
        with runtrace.run_span(f"step {ctx.step.kind}", ctx.run.traceparent, attributes=attempt_attributes(ctx)) \
                as span:
            attempt = steps.RunningAttempt(ctx.claim)
            lease = _Lease(self, ctx.claim)
            token = steps.RUNNING_ATTEMPT.set(attempt)
            try:
                await self.handlers[ctx.step.kind](ctx)
            except asyncio.CancelledError:
                if not lease.stop() or _cancelling():
                    raise  # we are shutting down, not (only) losing the lease
                runtrace.fail(span, "lease_lost")
                self._lost_lease()
            except StaleEpochError:
                lease.stop()
                runtrace.fail(span, "stale_epoch")
                self._lost_lease()
            except Exception as exc:  # the worker loop is the one place that catches broadly
                if lease.stop():  # lost meanwhile: the new owner decides, nothing more is written
                    runtrace.fail(span, "lease_lost")
                    self._lost_lease()
                    return
                log.exception("step %s/%s failed", ctx.claim.run_id, ctx.claim.step_id)
                runtrace.fail(span, type(exc).__name__, str(exc))
                steps.RUNNING_ATTEMPT.reset(token)
                await self._give_back(ctx, error=f"{type(exc).__name__}: {exc}")
            else:
                lease.stop()
                if not attempt.ended:  # else the handler's commit ended it (steps.end_attempt_in_commit)
                    steps.RUNNING_ATTEMPT.reset(token)
                    await self._release_if_unfinished(ctx)
            finally:
                lease.stop()
                if steps.RUNNING_ATTEMPT.get() is attempt:
                    steps.RUNNING_ATTEMPT.reset(token)

    async def _release_if_unfinished(self, ctx: StepContext) -> None:
        async with self.db.transaction() as conn:
            step = await steps.get_step(conn, ctx.claim.tenant_id, ctx.claim.run_id, ctx.claim.step_id)
            if step.state == StepState.RUNNING and step.owner_epoch == ctx.claim.owner_epoch:
                await steps.release_step(conn, ctx.claim, now=self.clock.now())
            else:
                await steps.end_attempt(conn, ctx.claim, outcome="finished", now=self.clock.now())

    async def _give_back(self, ctx: StepContext, *, error: str) -> None:
        """Release for a retry, or fail the step once it used up its attempts."""
        try:
            if await self._attempts(ctx) >= self.max_attempts:
                await self._fail(ctx, error=error)
                self.stats.failed += 1
                return
            async with self.db.transaction() as conn:
                await steps.release_step(conn, ctx.claim, now=self.clock.now(), error=error)
        except (StaleEpochError, ConcurrentUpdateError):
            self._lost_lease()

    def _lost_lease(self) -> None:
        self.stats.lost_lease += 1
        self.on_claim("lease_lost")

    async def _attempts(self, ctx: StepContext) -> int:
        c = ctx.claim
        async with self.db.reader() as conn:
            count = (await conn.execute(select(func.count()).select_from(attempts).where(
                attempts.c.tenant_id == c.tenant_id, attempts.c.run_id == c.run_id,
                attempts.c.step_id == c.step_id))).scalar()
        return int(count or 0)

    async def _fail(self, ctx: StepContext, *, error: str) -> None:
        """The step FAILED, its attempts used up. Decided on nothing of the run, so committed
        without an expected version (``RunCommit``): read first, a run another writer moved
        before the commit took its row refused it, and the step stayed RUNNING until its lease
        ran out, to be failed again by the next claim."""
        c = ctx.claim
        async with self.db.transaction() as conn:
            await runs.commit(conn, RunCommit(
                tenant_id=c.tenant_id, run_id=c.run_id, expected_version=None,
                fence=Fence(step_id=c.step_id, owner_epoch=c.owner_epoch),
                steps=(StepChange(step_id=c.step_id, state=StepState.FAILED),),
                events=(EventDraft(type=RunEventType.STEP_FAILED, data={"step_id": c.step_id, "error": error}),),
            ), at=self.clock.now())
            await steps.end_attempt(conn, c, outcome="failed", now=self.clock.now(), error=error)


def attempt_attributes(ctx: StepContext) -> dict[str, str | int]:
    c = ctx.claim
    return {"ira.tenant_id": c.tenant_id, "ira.run_id": c.run_id, "ira.step_id": c.step_id,
            "ira.step.kind": ctx.step.kind, "ira.owner_epoch": c.owner_epoch, "ira.attempt_id": c.attempt_id,
            "ira.owner": c.owner}


def _cancelling() -> bool:
    """Whether a cancellation from elsewhere (a shutdown) is still pending on this task."""
    task = asyncio.current_task()
    return task is not None and task.cancelling() > 0


class _Lease:
    """Renews a claim's lease every third of it while its handler runs in ``task``; once the
    renewal finds the lease taken over (a higher epoch), cancels ``task``.

    The renewal is a ``call_later`` timer that starts a task only when it is due, so a step
    that finishes within a third of its lease (nearly all of them) costs a timer, not a task.
    """

    def __init__(self, dispatcher: StepDispatcher, claim: Claim) -> None:
        self._dispatcher = dispatcher
        self._claim = claim
        self._task = asyncio.current_task()
        self._loop = asyncio.get_running_loop()
        self._period = dispatcher.lease.total_seconds() / 3
        self._timer: asyncio.TimerHandle | None = self._loop.call_later(self._period, self._due)
        self._beat: asyncio.Task[None] | None = None
        self._stopped = False
        self._lost = False
        self._cancelled = False

    def _due(self) -> None:
        self._timer = None
        if not self._stopped:
            self._beat = self._loop.create_task(self._renew())

    async def _renew(self) -> None:
        d = self._dispatcher
        try:
            async with d.db.transaction() as conn:
                self._claim = await steps.heartbeat(conn, self._claim, lease=d.lease, now=d.clock.now())
        except StaleEpochError:
            self._lost = True
            if not self._stopped and self._task is not None:
                self._cancelled = True
                self._task.cancel()
            return
        except TransientError as exc:  # the database blinked: try again next beat
            log.warning("heartbeat for %s/%s failed: %s", self._claim.run_id, self._claim.step_id, exc)
        if not self._stopped:
            self._timer = self._loop.call_later(self._period, self._due)

    def stop(self) -> bool:
        """Stop renewing; True if the lease was lost. A cancellation of the task this lease
        sent is taken back (only ours: one from elsewhere, a shutdown, stays pending)."""
        if not self._stopped:
            self._stopped = True
            if self._timer is not None:
                self._timer.cancel()
            if self._beat is not None and not self._beat.done():
                self._beat.cancel()
            if self._cancelled and self._task is not None:
                self._task.uncancel()
        return self._lost
