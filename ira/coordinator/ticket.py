"""``create_ticket``: the one external write, as an Operation (C4, C5).

1. C4 intent: the Operation with its stable idempotency key (tenant + incident + action +
   draft hash), the payload hash (the draft ref) and the approval it relies on.
2. C4 ``authorize``, in the intent's transaction (the run locked): the run, the fence, the
   approval (still APPROVED, same draft, same incident version) and the budget are checked,
   then the Operation moves to SUBMITTED. Only after that commit may a byte go to the ticket
   system. An intent that may not be sent (held, refused) commits without the permit. Where
   this process's intake claimed the step in the approval decision's transaction, 1 and 2 run
   there (:func:`prepare_with_decision`) and the handler goes on from step 3.
3. Send with the key and the claim's epoch; C5, in one transaction: the receipt is stored as
   evidence, the Operation becomes CONFIRMED_SUCCESS, and the step is finished (fenced; a
   stale owner's finish is refused and its receipt recorded alone). Where this process's
   intake claimed the ``complete`` step that finish readies (in the same transaction), C6
   runs there too (:func:`_complete_here`): one write transaction from the receipt to COMPLETED.

A new owner that finds the Operation SUBMITTED (receipt lost, worker killed) never sends
first: it raises the ticket system's write barrier to its own epoch and looks the ticket
up by key. Found: it adopts it. Not found behind a barrier: nothing older can land any
more, so it may send again with the same key. Never two tickets.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import NamedTuple

from opentelemetry import trace
from opentelemetry.trace import Status, StatusCode
from sqlalchemy.ext.asyncio import AsyncConnection

from ira.coordinator import gate, operations, records, verify
from ira.coordinator.chain import NotHere
from ira.coordinator.deps import Deps
from ira.coordinator.facts import charge_step, fence, incident_version, load_model, lock_run, on_known_run
from ira.coordinator.receipt import Declined, confirm_and_finish, idempotency_key, namespace
from ira.coordinator.reconcile import park
from ira.coordinator.records import DraftRecord
from ira.coordinator.workflow import COMPLETE, CREATE_TICKET, CREATE_TICKET_ACTION, PolicyAnswer, judge_action
from ira.core.commit import EventDraft, RunCommit, StepChange
from ira.core.errors import BudgetExhaustedError, ConcurrentUpdateError, ConnectorRejectedError
from ira.core.events import RunEventType
from ira.core.ids import new_id
from ira.core.operation import Approval, Operation
from ira.core.replay import SANDBOX_TICKETS, STAGING, staging_refusal
from ira.core.report import TicketDraft
from ira.core.run import Run
from ira.core.states import ApprovalState, OperationFact, RunState, StepState
from ira.core.ticket import Ticket, TicketRequest
from ira.runtime import runtrace
from ira.runtime.dispatch import StepContext, attempt_attributes
from ira.runtime.intake import carry, claimed_here, run_here
from ira.runtime.store import runs, steps, timers

log = logging.getLogger(__name__)
DEADLINE_TIMER = "operation_deadline"

# Fault points around the Operation (fault tests kill the process there; see tests/faults/).
AFTER_INTENT = "ticket.after_intent"  #: the intent committed (with its SUBMITTED permit if it may be sent)
AFTER_SUBMIT = "ticket.after_submit"  #: SUBMITTED committed, no byte sent yet
AFTER_RECEIPT = "ticket.after_receipt"  #: receipt stored (CONFIRMED_SUCCESS) and, by its owner, the step DONE
AFTER_FINISH = "ticket.after_finish"  #: step DONE committed, the next step not yet run


STAGING_NO_TICKET = "staging_sandbox: no sandbox ticket system; nothing is created for a staging run"
"""A staging run bound to the sandbox creates nothing where no sandbox ticket system is given."""

class Mode(StrEnum):
    SEND = "send"  #: this owner moved the Operation to SUBMITTED: it may send
    VERIFY = "verify"  #: SUBMITTED before: look it up by key, never send first
    DONE = "done"
    FAILED = "failed"
    STOP = "stop"


async def create_ticket(deps: Deps, ctx: StepContext) -> None:
    carried = ctx.carried
    prepared = carried.prepared if isinstance(carried, PreparedWithDecision) \
        else await _prepare_on_claimed_run(deps, ctx)
    if prepared is None:
        return
    op, request, environment, mode, permitted = prepared
    deps = deps.for_environment(environment)  # staging: the sandbox only, whatever is bound (checked at dispatch)
    with trace.get_tracer(__name__).start_as_current_span("ticket operation", attributes={
            "ira.operation_id": op.operation_id, "ira.operation.kind": op.kind, "ira.ticket.system": deps.tickets.name,
            "ira.operation.key_prefix": op.idempotency_key[:12], "ira.owner_epoch": ctx.claim.owner_epoch}) as span:
        deps.faults.hit(AFTER_INTENT)
        mode, ticket, path = await _reach(deps, ctx, op, mode, request=request)
        span.set_attribute("ira.operation.path", path)
        span.set_attribute("ira.operation.outcome", mode.value)
        if mode == Mode.DONE:
            # where one writer at a time (SQLite), the finish decides on the run as the permit left it
            known = permitted if path == "created" and deps.db.dialect == "sqlite" else None
            completed = await confirm_and_finish(deps, ctx.claim, op, ticket, adopted=path == "adopted", run=known,
                                                 then=lambda conn, run: _complete_here(deps, conn, run))
            deps.faults.hit(AFTER_RECEIPT)
            deps.faults.hit(AFTER_FINISH)
            if completed:
                deps.faults.hit(verify.AFTER_COMPLETE)
        elif mode == Mode.FAILED:
            span.set_status(Status(StatusCode.ERROR, "confirmed_failure"))
            await _fail(deps, ctx, op, reason="confirmed_failure")


async def _complete_here(deps: Deps, conn: AsyncConnection, run: Run) -> bool:
    """C6 in the receipt's transaction, under the ``complete`` step's claim that this process's
    intake took in it (``intake.run_here``): charged and verified as the step's handler does
    (``handlers.complete``), its fenced commit ending the claim's attempt. Only a run that
    passes: anything else (a check that fails, an Operation in doubt, an exhausted budget)
    declines, the transaction is made again without it, and the step runs on its own.
    False: no such claim here."""
    ctx = run_here(conn, run.tenant_id, run.run_id, COMPLETE)
    if ctx is None:
        return False
    now = deps.clock.now()
    # the attempt's span as the dispatcher opens one: the run's trace shows its complete step
    with runtrace.run_span(f"step {COMPLETE}", ctx.run.traceparent, attributes=attempt_attributes(ctx)), \
            steps.running_attempt(ctx.claim):
        try:  # the charge is written by the completing commit, which raises if it did not fit
            await charge_step(conn, ctx.claim, config=deps.config, at=now)
            completed = await verify.complete_if_verified(conn, ctx.claim, config=deps.config, at=now, run=ctx.run)
        except BudgetExhaustedError as exc:  # the step ends the run for it, on its own
            raise Declined(str(exc)) from exc
        if completed is None:
            raise Declined(f"run {run.run_id} does not pass verification yet")
    return True


async def _reach(deps: Deps, ctx: StepContext, op: Operation, mode: Mode, *,
                 request: TicketRequest) -> tuple[Mode, Ticket | None, str]:
    """From the permit to an outcome: (mode, the ticket this owner holds, the path taken)."""
    path, ticket = mode.value, None
    if mode == Mode.VERIFY:
        mode, ticket = await _verify(deps, ctx, op)
        path = "adopted" if mode == Mode.DONE else path
    if mode == Mode.SEND:
        deps.faults.hit(AFTER_SUBMIT)
        mode, ticket = await _send(deps, ctx, op, request=request)
        path = "created" if mode == Mode.DONE else path
    return mode, ticket, path


class _Prepared(NamedTuple):
    op: Operation
    request: TicketRequest
    environment: str
    mode: Mode
    permitted: Run | None
    """The run as the permit's commit left it (this owner may send), else None."""


async def _prepare_on_claimed_run(deps: Deps, ctx: StepContext) -> _Prepared | None:
    """Where the store lets one writer in at a time (SQLite: the transaction holds the database's
    write lock, so the draft and the approvals it reads cannot change before it commits), the
    step's first claim decides on the run as the claim read it (``StepContext.run``) instead of
    reading the row: every way through a new intent ends in a run commit, whose compare-and-set
    refuses a run that moved since, and then the transaction runs once more with the run read
    under lock (nothing is sent before it commits: the first try leaves nothing behind). Later
    claims (an Operation from before, whose paths may commit nothing on the run) and PostgreSQL
    lock the run row at once."""
    known = ctx.run if deps.db.dialect == "sqlite" and ctx.claim.owner_epoch == 1 else None
    return await on_known_run(known, lambda run: _prepare(deps, ctx, claimed=run))


async def _prepare(deps: Deps, ctx: StepContext, *, claimed: Run | None) -> _Prepared | None:
    """C4 in one transaction: the intent (or the step's Operation from before) and, if it may be
    sent now, its SUBMITTED permit. Intent and permit commit together: on the way to a send,
    "recorded, not yet authorized" never outlives a transaction (a held intent still commits alone)."""
    async with deps.db.transaction() as conn:
        return await _prepare_in(deps, conn, ctx, claimed or await lock_run(conn, ctx.claim.tenant_id,
                                                                             ctx.claim.run_id))


async def _prepare_in(deps: Deps, conn: AsyncConnection, ctx: StepContext, run: Run, *,
                      view: gate.ApprovalView | None = None) -> _Prepared | None:
    """:func:`_prepare` in ``conn``'s transaction, on ``run`` as this transaction holds it locked;
    ``view``: the run's approval view as this transaction holds it, if it has one (else read here)."""
    now, c = deps.clock.now(), ctx.claim
    if view is None:
        view = await gate.approval_view(conn, run)
    draft = view.draft
    doc = await load_model(conn, c.tenant_id, draft.ref if draft else None, model=TicketDraft)
    if run.state != RunState.RUNNING or draft is None or doc is None:
        return None
    approval = view.usable()
    # the step's first claim (epoch 1) follows no earlier create_ticket: no Operation of its own yet
    existing = await operations.for_step(conn, c.tenant_id, c.run_id, step_id=CREATE_TICKET) \
        if c.owner_epoch > 1 else None
    if existing is not None and existing.payload_hash == draft.ref:
        op = await _rebind(conn, existing, approval, at=now)
        mode, permitted = await _authorize(conn, ctx, run, op, usable=approval, recorded=(), deps=deps)
    else:
        op, mode, permitted = await _intend(conn, ctx, run, draft, approval, deps=deps)
    return _Prepared(op, doc.request, run.environment, mode, permitted)


@dataclass(frozen=True)
class PreparedWithDecision:
    """``StepContext.carried`` of a ``create_ticket`` whose C4 ran in the approval decision's
    transaction (:func:`prepare_with_decision`): what :func:`_prepare` would have returned."""

    prepared: _Prepared | None


async def prepare_with_decision(deps: Deps, conn: AsyncConnection, tenant_id: str, run_id: str, *,
                                view: gate.ApprovalView | None = None) -> None:
    """C4 (the intent and, if it may be sent, its SUBMITTED permit) in the transaction of the
    approval decision whose commit readied ``create_ticket``, under the claim this process's
    intake took in it (``intake.claimed_here``); the step's handler, started after the commit,
    goes on from there (``StepContext.carried``): one write transaction fewer per approved run.

    Nothing is sent before the decision and the permit have committed together, and the permit
    checks what the handler's own transaction would check right after that commit: the run is
    held by the decision's compare-and-set, and the draft, the approvals and the approval just
    settled are read in this transaction (``dispatch_problem``; ``view``: the decision's own
    read of them, as its transaction now holds them, ``gate.decide_in_view``). Its failure must not cost the
    decision: raised as :class:`NotHere`, the caller makes the decision again without it
    (``decisions.record_decision``) and the step goes its usual way. Nothing without such a
    claim (no intake of this process took the step)."""
    ctx = claimed_here(conn, tenant_id, run_id, CREATE_TICKET)
    if ctx is None:
        return
    try:
        prepared = await _prepare_in(deps, conn, ctx, ctx.run, view=view)
    except Exception as exc:  # anything: the decision must not depend on it
        raise NotHere(f"create_ticket of run {run_id} could not be prepared with its approval") from exc
    carry(conn, ctx, PreparedWithDecision(prepared))


async def _intend(conn: AsyncConnection, ctx: StepContext, run: Run, draft: DraftRecord, approval: Approval | None,
                  *, deps: Deps) -> tuple[Operation, Mode, Run | None]:
    """C4 for a new intent. One that may be sent now is written SUBMITTED at once, with this
    owner's epoch and its deadline: in the transaction that records it, the row nobody else can
    see yet needs no compare-and-set from INTENT_RECORDED (both facts' events are still written,
    in order). Not sendable, or its key recorded before (the same draft's intent): as before,
    through :func:`_authorize`."""
    now, c = deps.clock.now(), ctx.claim
    intent = Operation(
        operation_id=new_id("op"), tenant_id=c.tenant_id, run_id=c.run_id, step_id=CREATE_TICKET,
        kind=CREATE_TICKET_ACTION, idempotency_key=idempotency_key(c.tenant_id, run.incident_id or "", draft.ref),
        payload_hash=draft.ref, approval_id=approval.approval_id if approval else None,
        fact_state=OperationFact.INTENT_RECORDED, owner_epoch=c.owner_epoch, created_at=now, updated_at=now)
    tickets = deps.for_environment(run.environment).tickets.name
    sendable = await dispatch_problem(conn, run, intent, tickets=tickets, usable=approval) is None
    deadline = now + deps.config.operation_deadline
    op = await operations.record_intent(conn, intent, submitted_until=deadline if sendable else None)
    if op is not intent or not sendable:
        return op, *await _authorize(conn, ctx, run, op, usable=approval, recorded=_intent_recorded(op), deps=deps)
    await charge_step(conn, c, config=deps.config, at=now)  # written by _submit's commit
    return op, Mode.SEND, await _submit(conn, ctx, run, op=op, deadline=deadline, at=now,
                                        events=_intent_recorded(op), moved=True)


def _intent_recorded(op: Operation) -> tuple[EventDraft, ...]:
    return (EventDraft(type=RunEventType.OPERATION_INTENT_RECORDED, data={
        "operation_id": op.operation_id, "idempotency_key": op.idempotency_key,
        "payload_hash": op.payload_hash, "approval_id": op.approval_id}),)


async def _rebind(conn: AsyncConnection, op: Operation, approval: Approval | None, *, at: datetime) -> Operation:
    """An intent not yet sent relies on the newest approval that still binds its draft (the
    incident moved on and a person approved again); anything already sent keeps its own."""
    if op.fact_state != OperationFact.INTENT_RECORDED or approval is None or op.approval_id == approval.approval_id:
        return op
    await operations.move(conn, op, approval_id=approval.approval_id, at=at)
    return op.model_copy(update={"approval_id": approval.approval_id})


async def _authorize(conn: AsyncConnection, ctx: StepContext, run: Run, op: Operation, *, usable: Approval | None,
                     recorded: tuple[EventDraft, ...], deps: Deps) -> tuple[Mode, Run | None]:
    """``authorize_dispatch_if_current``, in the intent's transaction (the run locked, ``usable``
    read under that lock): SUBMITTED is committed before any byte is sent. With the mode, the run
    as the permit's commit left it (None: no permit)."""
    now, c = deps.clock.now(), ctx.claim
    ready = op.fact_state == OperationFact.INTENT_RECORDED
    tickets = deps.for_environment(run.environment).tickets.name
    problem = await dispatch_problem(conn, run, op, tickets=tickets, usable=usable) if ready else None
    if recorded and (problem is not None or not ready):  # the intent's event commits alone
        run = await runs.commit(conn, RunCommit(tenant_id=c.tenant_id, run_id=c.run_id,
                                                expected_version=run.state_version, fence=fence(c), events=recorded),
                                at=now)
    if not ready:
        return _mode_of(op.fact_state), None
    if problem is not None:
        await _hold(conn, ctx, run, op=op, problem=problem, deps=deps)
        return Mode.STOP, None
    await charge_step(conn, c, config=deps.config, at=now)  # written by _submit's commit
    return Mode.SEND, await _submit(conn, ctx, run, op=op, deadline=now + deps.config.operation_deadline, at=now,
                                    events=recorded)


async def _submit(conn: AsyncConnection, ctx: StepContext, run: Run, *, op: Operation, deadline: datetime,
                  at: datetime, events: tuple[EventDraft, ...], moved: bool = False) -> Run:
    """SUBMITTED, with this owner's epoch and a durable deadline, fenced: the send permit.
    ``moved``: the intent was written SUBMITTED in this transaction (:func:`_intend`)."""
    c = ctx.claim
    if not moved and not await operations.move(conn, op, to=OperationFact.SUBMITTED, owner_epoch=c.owner_epoch,
                                               deadline_at=deadline, at=at):
        raise ConcurrentUpdateError(f"operation {op.operation_id} moved concurrently")
    await timers.schedule_timer(conn, timers.Timer(
        tenant_id=c.tenant_id, timer_id=f"opdl:{op.operation_id}:{c.owner_epoch}", kind=DEADLINE_TIMER,
        due_at=deadline, run_id=c.run_id, step_id=CREATE_TICKET, payload={"operation_id": op.operation_id}))
    return await runs.commit(conn, RunCommit(
        tenant_id=c.tenant_id, run_id=c.run_id, expected_version=run.state_version, fence=fence(c),
        events=(*events, EventDraft(type=RunEventType.OPERATION_SUBMITTED, data={
            "operation_id": op.operation_id, "owner_epoch": c.owner_epoch, "deadline": deadline.isoformat()}))),
        at=at)


def _mode_of(fact: OperationFact) -> Mode:
    if fact == OperationFact.CONFIRMED_SUCCESS:
        return Mode.DONE
    if fact == OperationFact.CONFIRMED_FAILURE:
        return Mode.FAILED
    return Mode.VERIFY


async def dispatch_problem(conn: AsyncConnection, run: Run, op: Operation, *, tickets: str,
                           usable: Approval | None = None) -> str | None:
    """Why this Operation may not be sent now to the ``tickets`` system (None: it may): staging
    targets (the stored binding, checked again here), contract, approval binding. ``usable``:
    :meth:`gate.ApprovalView.usable` as read under the run's lock in this transaction; the Operation
    relying on that very approval for its draft needs no second look at it."""
    if run.environment == STAGING:
        refused = staging_refusal(run.environment, run.bindings.get("targets"), "tickets")
        if refused or tickets != SANDBOX_TICKETS:
            return refused or STAGING_NO_TICKET
    answer = judge_action(run.contract, op.kind)
    if answer != PolicyAnswer.ASK:
        return None if answer == PolicyAnswer.ALLOW else "action_blocked"
    if op.approval_id is None:
        return "no_approval"
    if usable is not None and usable.approval_id == op.approval_id and usable.payload_hash == op.payload_hash:
        return None
    approval = await records.get_approval(conn, run.tenant_id, op.approval_id)
    draft = await records.current_draft(conn, run.tenant_id, run.run_id)
    if approval.state != ApprovalState.APPROVED:
        return f"approval_{approval.state.value}"
    if draft is None or draft.ref != op.payload_hash or approval.payload_hash != op.payload_hash:
        return "draft_changed"
    if approval.resource_version != await incident_version(conn, run):
        return "resource_changed"
    return None


async def _hold(conn: AsyncConnection, ctx: StepContext, run: Run, *, op: Operation, problem: str,
                deps: Deps) -> None:
    """Not sendable now: blocked by contract -> a definite failure; an approval that no longer
    binds (the incident moved on) -> nothing is sent and a person is asked again."""
    if problem == "action_blocked" or problem.startswith("staging_"):
        await _refuse(conn, ctx, run, op=op, problem=problem, at=deps.clock.now())
        return
    draft = await records.current_draft(conn, run.tenant_id, run.run_id)
    assert draft is not None  # an intent exists only for a draft
    await gate.ask(conn, run, draft, config=deps.config, at=deps.clock.now(), claim=ctx.claim, events=(
        EventDraft(type=RunEventType.OPERATION_HELD, data={"operation_id": op.operation_id, "reason": problem}),))


async def _refuse(conn: AsyncConnection, ctx: StepContext, run: Run, *, op: Operation, problem: str,
                  at: datetime) -> None:
    """Never sent: the fact is a definite failure, the step fails, the verifier ends the run."""
    await operations.move(conn, op, to=OperationFact.CONFIRMED_FAILURE, at=at)
    await runs.commit(conn, RunCommit(
        tenant_id=run.tenant_id, run_id=run.run_id, expected_version=run.state_version, fence=fence(ctx.claim),
        steps=(StepChange(step_id=CREATE_TICKET, state=StepState.FAILED),),
        events=(EventDraft(type=RunEventType.OPERATION_REFUSED, data={"operation_id": op.operation_id,
            "reason": problem}),)),
        at=at)


async def _verify(deps: Deps, ctx: StepContext, op: Operation) -> tuple[Mode, Ticket | None]:
    """Recovery by a new owner: barrier first, then look up by key; adopt or re-authorize."""
    c = ctx.claim
    definitive = await deps.tickets.raise_barrier(c.tenant_id, namespace(c.run_id), c.owner_epoch)
    found = await deps.tickets.find_by_key(c.tenant_id, op.idempotency_key)
    if found is not None:
        return Mode.DONE, found
    if not definitive:
        await park(deps, ctx, op)
        return Mode.STOP, None
    now = deps.clock.now()
    async with deps.db.transaction() as conn:
        run = await lock_run(conn, c.tenant_id, c.run_id)
        if not await operations.move(conn, op, to=OperationFact.SUBMITTED, owner_epoch=c.owner_epoch, at=now,
                                     from_facts=operations.IN_DOUBT):
            raise ConcurrentUpdateError(f"operation {op.operation_id} moved concurrently")
        await runs.commit(conn, RunCommit(
            tenant_id=c.tenant_id, run_id=c.run_id, expected_version=run.state_version, fence=fence(c),
            events=(EventDraft(type=RunEventType.OPERATION_RETRY_AUTHORIZED, data={
                "operation_id": op.operation_id, "owner_epoch": c.owner_epoch,
                "evidence": f"{deps.tickets.name}: no ticket for the key behind a barrier at epoch {c.owner_epoch}"}),
            )), at=now)
    return Mode.SEND, None


async def _send(deps: Deps, ctx: StepContext, op: Operation, *, request: TicketRequest) -> tuple[Mode, Ticket | None]:
    c = ctx.claim
    try:
        ticket = await deps.tickets.create(request, idempotency_key=op.idempotency_key,
                                           namespace=namespace(c.run_id), epoch=c.owner_epoch)
    except ConnectorRejectedError as exc:
        await _fail(deps, ctx, op, reason=exc.message)
        return Mode.STOP, None
    return Mode.DONE, ticket


async def _fail(deps: Deps, ctx: StepContext, op: Operation, *, reason: str) -> None:
    """The ticket system said no (or said so before): a definite failure of this step."""
    now, c = deps.clock.now(), ctx.claim
    async with deps.db.transaction() as conn:
        run = await lock_run(conn, c.tenant_id, c.run_id)
        await operations.move(conn, op, to=OperationFact.CONFIRMED_FAILURE, at=now, error=reason,
                              from_facts=operations.IN_DOUBT)
        await runs.commit(conn, RunCommit(
            tenant_id=c.tenant_id, run_id=c.run_id, expected_version=run.state_version, fence=fence(c),
            steps=(StepChange(step_id=CREATE_TICKET, state=StepState.FAILED),),
            events=(EventDraft(type=RunEventType.OPERATION_FAILED, data={"operation_id": op.operation_id,
                                                              "reason": reason}),)), at=now)
