"""C5 facts of the ticket Operation: its identity at the ticket system, and its receipt.

A receipt is recorded whoever observes it and whatever the run's state (a ticket that
appeared after a cancel is still the truth). The owner of ``create_ticket`` records it and
finishes its step in ONE transaction (:func:`confirm_and_finish`); if the fenced finish is
refused (a stale owner), that transaction rolls back and the receipt is recorded alone, so
the fact is never lost with the refusal (no savepoint on the way that succeeds).

What follows the finish may go in its transaction too (``then``: the ``complete`` step, claimed in
that transaction, verified and committed in it). If that part fails or declines, the whole
transaction rolls back and the receipt and finish are committed again without it, so whatever
follows can never cost the receipt; the step it would have run then goes its usual way.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy.ext.asyncio import AsyncConnection

from ira.coordinator import operations
from ira.coordinator.config import WorkflowConfig
from ira.coordinator.deps import Deps
from ira.coordinator.facts import fence, lock_run, on_known_run, store_json
from ira.coordinator.notify import request_notification
from ira.coordinator.report import canonical_json
from ira.coordinator.workflow import CREATE_TICKET, CREATE_TICKET_ACTION
from ira.core.commit import EventDraft, OutboxMessage, RunCommit, StepChange
from ira.core.delivery import NotificationKind
from ira.core.errors import ConcurrentUpdateError, DomainError, IllegalTransitionError
from ira.core.events import RunEventType
from ira.core.operation import Operation
from ira.core.run import Claim, Run
from ira.core.states import TERMINAL_RUN_STATES, OperationFact, OperationHandling, StepState
from ira.core.ticket import Ticket
from ira.runtime import runtrace
from ira.runtime.store import outbox, runs

log = logging.getLogger(__name__)

Then = Callable[[AsyncConnection, Run], Awaitable[bool]]
"""What follows a finish in its transaction, given the run as the finish left it: True if it
wrote something (it ran), False if it had nothing to do. Raising rolls the transaction back
(:func:`confirm_and_finish` then commits the finish alone); :class:`Declined` is the quiet way."""


class Declined(Exception):
    """What follows the finish will not commit here (its check did not pass): the finish alone."""


def namespace(run_id: str) -> str:
    """The fencing namespace at the ticket system: this run's create_ticket step."""
    return f"{run_id}/{CREATE_TICKET}"


def idempotency_key(tenant_id: str, incident_id: str, draft_ref: str) -> str:
    """Stable across retries, owners and restarts; a new draft is a new intent."""
    basis = "\n".join((tenant_id, incident_id, CREATE_TICKET_ACTION, draft_ref))
    return "sha256:" + hashlib.sha256(basis.encode()).hexdigest()


@dataclass(frozen=True)
class Confirmed:
    """A receipt recorded in the caller's transaction, and what is left to say about it."""

    operation: Operation
    """The Operation as confirmed (its key and link as the ticket system gave them)."""
    receipt_ref: str | None
    events: tuple[EventDraft, ...] = ()
    """OPERATION_CONFIRMED, for the run's log; none if the Operation was confirmed before."""
    outbox: tuple[OutboxMessage, ...] = ()
    """The TICKET_CREATED notification (people hear of the ticket when it exists)."""

    async def tell(self, conn: AsyncConnection, run: Run, *, at: datetime) -> None:
        """Its events and notification without a run commit of their own."""
        if self.events:
            await runs.append_events(conn, run.tenant_id, run.run_id, self.events, at=at)
        await outbox.enqueue(conn, runtrace.stamp(self.outbox, runtrace.parent_for(run.traceparent)), at=at)


async def confirm(conn: AsyncConnection, run: Run, op: Operation, ticket: Ticket, *, adopted: bool, epoch: int,
                  config: WorkflowConfig, at: datetime) -> Confirmed:
    """C5: store the receipt and confirm the fact; its event and notification are returned
    for the caller's commit (``Confirmed.tell`` when there is none)."""
    receipt = await store_json(conn, op.tenant_id, canonical_json(ticket), config=config, at=at)
    # the compare-and-set first: only an Operation that is no longer in doubt is read back
    current = op
    if not await operations.move(conn, op, to=OperationFact.CONFIRMED_SUCCESS, receipt=ticket,
                                 handling=OperationHandling.NONE, at=at, from_facts=operations.IN_DOUBT):
        current = await operations.get_operation(conn, op.tenant_id, op.operation_id)
        if current.fact_state == OperationFact.CONFIRMED_SUCCESS:
            if current.external_ref != ticket.key:
                raise DomainError(f"operation {op.operation_id} confirmed {current.external_ref}, now {ticket.key}")
            return Confirmed(operation=current, receipt_ref=receipt.ref)
    late = run.state in TERMINAL_RUN_STATES
    event = EventDraft(type=RunEventType.OPERATION_CONFIRMED, data={
        "operation_id": op.operation_id, "external_ref": ticket.key, "system": ticket.system,
        "external_url": ticket.url, "receipt_ref": receipt.ref, "adopted": adopted, "owner_epoch": epoch, "late": late})
    # people hear of the ticket when it exists (late: found after the run ended, by reconciliation)
    message = await request_notification(conn, run, kind=NotificationKind.TICKET_CREATED, config=config, at=at,
                                         data={"ticket_key": ticket.key, "title": ticket.title, "url": ticket.url,
                                               "late": late})
    confirmed = current.model_copy(update={
        "fact_state": OperationFact.CONFIRMED_SUCCESS, "handling_state": OperationHandling.NONE,
        "external_ref": ticket.key, "external_system": ticket.system, "external_url": ticket.url})
    return Confirmed(operation=confirmed, receipt_ref=receipt.ref, events=(event,), outbox=(message,))


async def record_receipt(deps: Deps, op: Operation, ticket: Ticket, *, adopted: bool, epoch: int) -> str:
    """C5 alone, in its own transaction (reconciliation: nobody's step to finish). Returns the receipt ref.

    The run's row is locked first, as every writer of a run and its Operations does
    (:func:`lock_run`, then the Operation): ``confirm`` locks the Operation's row and the event's
    append the run's, and taken in that order they deadlocked with a cancel's reconciliation
    on PostgreSQL."""
    now = deps.clock.now()
    async with deps.db.transaction() as conn:
        run = await lock_run(conn, op.tenant_id, op.run_id)
        confirmed = await confirm(conn, run, op, ticket, adopted=adopted, epoch=epoch, config=deps.config, at=now)
        await confirmed.tell(conn, run, at=now)
        assert confirmed.receipt_ref is not None
        return confirmed.receipt_ref


async def confirm_and_finish(deps: Deps, claim: Claim, op: Operation, ticket: Ticket | None, *,
                             adopted: bool, run: Run | None = None, then: Then | None = None) -> bool:
    """C5 and the step's end in one transaction. ``ticket``: the one this owner created or
    adopted; None: the Operation was confirmed before, and is looked up for the step's result.
    A refused finish (stale epoch, run moved on) rolls the transaction back; the receipt is then
    recorded on its own (:func:`record_receipt`) before the refusal is raised.

    ``run``: the run as this owner's own last commit left it, where the store lets one writer in
    at a time (SQLite): the transaction decides on it instead of reading the row, and if the
    commit's compare-and-set finds that the run moved since, it runs once more with the run read
    under lock (nothing of the first try outlives its rollback; a stale fence is not retried).

    ``then``: what follows the finish in the same transaction (:data:`Then`); True if it ran
    there. Should it fail or decline, the transaction is rolled back and made again without it."""
    if ticket is None:
        ticket = await deps.tickets.find_by_key(claim.tenant_id, op.idempotency_key)
    try:
        try:
            return await on_known_run(run, lambda known: _confirm_and_finish(
                deps, claim, op, ticket, adopted=adopted, known=known, then=then))
        except _Failed as failed:
            if not isinstance(failed.__cause__, Declined):
                log.warning("run %s: what follows the ticket's finish failed in its transaction; the finish "
                            "commits alone", claim.run_id, exc_info=failed.__cause__)
            return await on_known_run(run, lambda known: _confirm_and_finish(
                deps, claim, op, ticket, adopted=adopted, known=known, then=None))
    except (ConcurrentUpdateError, IllegalTransitionError):
        if ticket is not None:
            await record_receipt(deps, op, ticket, adopted=adopted, epoch=claim.owner_epoch)
        raise


class _Failed(Exception):
    """``then`` raised (its exception is the cause): the transaction rolls back."""


async def _confirm_and_finish(deps: Deps, claim: Claim, op: Operation, ticket: Ticket | None, *,
                              adopted: bool, known: Run | None, then: Then | None) -> bool:
    now = deps.clock.now()
    async with deps.db.transaction() as conn:
        run = known or await lock_run(conn, claim.tenant_id, claim.run_id)
        if ticket is None:
            confirmed = Confirmed(operation=await operations.get_operation(conn, op.tenant_id, op.operation_id),
                                  receipt_ref=None)
        else:
            confirmed = await confirm(conn, run, op, ticket, adopted=adopted, epoch=claim.owner_epoch,
                                      config=deps.config, at=now)
        finished = await runs.commit(conn, _finished(claim, run, confirmed), at=now)
        if then is None:
            return False
        try:
            return await then(conn, finished)
        except Exception as exc:  # anything: the finish must not depend on what follows it
            raise _Failed from exc


def _finished(claim: Claim, run: Run, confirmed: Confirmed) -> RunCommit:
    """The step DONE with the receipt as its result, fenced; the key and link as the Operation
    confirmed them (a ticket system's search may not show the ticket yet)."""
    op = confirmed.operation
    return RunCommit(
        tenant_id=run.tenant_id, run_id=run.run_id, expected_version=run.state_version, fence=fence(claim),
        steps=(StepChange(step_id=CREATE_TICKET, state=StepState.DONE, result_ref=confirmed.receipt_ref),),
        events=(*confirmed.events, EventDraft(type=RunEventType.TICKET_CREATED, data={
            "operation_id": op.operation_id, "key": op.external_ref, "system": op.external_system,
            "url": op.external_url})),
        outbox=confirmed.outbox)
