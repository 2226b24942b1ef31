"""Coordinator steps run in the transaction of the step whose commit readied them.

``join`` readies ``synthesize``, which readies ``approve_ticket``; this process's intake claims
each readied step in the transaction that readied it (``StepIntake.taken``). Instead of starting
its handler after the commit (a task, a span, a transaction of its own, 0.4-0.6 ms of hand-over
on a loaded machine), the readying step runs it right there, under that claim
(``intake.run_here``), and that step's fenced commit ends the claim's attempt: from the join to
WAITING(approval) is one write transaction. Each step still decides on the run as it is in
that transaction and makes its own fenced commit (its epoch, the compare-and-set on the run's
version, its events in order with gapless run_seq, its outbox rows), so readers see the same log.

What follows never costs the step before it: should it fail (or not finish its step), the whole
transaction rolls back and is made again without it (:func:`chained`), and the step it would
have run goes its usual way (claimed in that second transaction, started after its commit).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

from sqlalchemy.ext.asyncio import AsyncConnection

from ira.coordinator.deps import Deps
from ira.core.errors import BudgetExhaustedError
from ira.core.run import Claim
from ira.runtime import runtrace
from ira.runtime.dispatch import StepContext, attempt_attributes
from ira.runtime.intake import run_here
from ira.runtime.store import steps

log = logging.getLogger(__name__)

Body = Callable[[AsyncConnection, bool], Awaitable[None]]
"""A step's transaction, given its connection and whether the steps it readies may run in it."""


class NotHere(Exception):
    """A step run in the transaction that readied it raised (its exception is the cause), or
    left its step unfinished: the transaction rolls back."""


async def chained(deps: Deps, claim: Claim, body: Body) -> None:
    """``body`` in one transaction with what its commit readies run in it too; should that part
    fail, ``body`` once more in a transaction of its own, without it."""
    try:
        async with deps.db.transaction() as conn:
            await body(conn, True)
        return
    except NotHere as failed:
        if not isinstance(failed.__cause__, BudgetExhaustedError):  # that step ends the run, on its own
            log.warning("run %s: a step readied by %s failed in its transaction; %s commits alone",
                        claim.run_id, claim.step_id, claim.step_id, exc_info=failed.__cause__)
    async with deps.db.transaction() as conn:
        await body(conn, False)


async def then_here(conn: AsyncConnection, tenant_id: str, run_id: str, step_id: str,
                    step: Callable[[StepContext], Awaitable[None]]) -> None:
    """Run ``step`` in ``conn``'s transaction under the claim this process's intake took in it for
    ``step_id`` (``intake.run_here``), inside the attempt's span as the dispatcher opens one. It
    must finish its step with a fenced commit (which ends the attempt); else, or if it raises,
    :class:`NotHere`. Nothing if there is no such claim: the step goes its usual way."""
    ctx = run_here(conn, tenant_id, run_id, step_id)
    if ctx is None:
        return
    with runtrace.run_span(f"step {ctx.step.kind}", ctx.run.traceparent, attributes=attempt_attributes(ctx)), \
            steps.running_attempt(ctx.claim) as attempt:
        try:
            await step(ctx)
        except NotHere:
            raise
        except Exception as exc:  # anything: the step before must not depend on this one
            raise NotHere from exc
        if not attempt.ending:
            raise NotHere(f"{step_id} of run {run_id} did not finish in the transaction that readied it")
