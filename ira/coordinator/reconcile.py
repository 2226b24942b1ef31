"""Operations in doubt: reconcile by key, resume the run, or hand the case to a person.

An Operation is in doubt (SUBMITTED or UNKNOWN) when bytes may have left and no receipt
was stored. Reconciliation never sends: it fences older writers at the ticket system (a
barrier above every epoch that could still be in flight) and looks the ticket up by key.
Found: the fact is recorded, even on a run that already ended. Not found behind a barrier:
nothing older can land, so the run may try again (or, if it ended, nothing was created).
Undecidable past the deadline: the Operation goes to MANUAL_REPAIR with a WorkItem that
carries what is known, where the evidence is and what to query; closing it needs evidence.
"""

from __future__ import annotations

import json
import logging
from datetime import datetime

from sqlalchemy.ext.asyncio import AsyncConnection

from ira.coordinator import operations, records
from ira.coordinator.deps import Deps
from ira.coordinator.ending import RECONCILE_TIMER
from ira.coordinator.facts import fence, lock_run, store_json
from ira.coordinator.notify import announce
from ira.coordinator.receipt import namespace, record_receipt
from ira.coordinator.workflow import COMPLETE, CREATE_TICKET
from ira.core.commit import EventDraft, RunCommit, StepChange
from ira.core.delivery import NotificationKind
from ira.core.errors import DomainError, NotFoundError, StaleEpochError
from ira.core.events import RunEventType
from ira.core.ids import new_id
from ira.core.operation import Operation, WorkItem
from ira.core.run import Run, Step
from ira.core.states import (
    FINISHED_STEP_STATES,
    TERMINAL_RUN_STATES,
    OperationFact,
    OperationHandling,
    RunState,
    StepState,
    WaitKind,
    WorkItemState,
)
from ira.runtime.dispatch import StepContext
from ira.runtime.store import runs, steps, timers
from ira.runtime.store.artifacts import get_artifact
from ira.runtime.wakeup import step_wakeup

log = logging.getLogger(__name__)
MANUAL_REPAIR = "manual_repair"
FINAL_TIMER = "operation_deadline"
LOOKS_AGAIN = 3
"""Lookups of a parked Operation before its deadline (at 1/4, 1/2 and 3/4 of it)."""


async def park(deps: Deps, ctx: StepContext, op: Operation) -> None:
    """Undecidable now (no barrier support, nothing found): wait, releasing the worker.

    Nothing found is not "not created" where no barrier holds older writes back (Jira,
    GitHub): the create may still be in flight or not yet searchable. So nothing is sent
    again; reconciliation looks again ``LOOKS_AGAIN`` times before the deadline (adopting the
    ticket as soon as it shows up) and, still nothing at the deadline, asks a person.
    """
    now, c = deps.clock.now(), ctx.claim
    async with deps.db.transaction() as conn:
        run = await lock_run(conn, c.tenant_id, c.run_id)
        await operations.move(conn, op, to=OperationFact.UNKNOWN, handling=OperationHandling.RECONCILING, at=now,
                              from_facts=operations.IN_DOUBT)
        await timers.schedule_timer(conn, timers.Timer(
            tenant_id=c.tenant_id, timer_id=new_id("tmr"), kind=FINAL_TIMER, run_id=c.run_id, step_id=CREATE_TICKET,
            due_at=max(now, now + deps.config.operation_deadline), payload={"operation_id": op.operation_id}))
        for look in range(1, LOOKS_AGAIN + 1):
            await timers.schedule_timer(conn, timers.Timer(
                tenant_id=c.tenant_id, timer_id=new_id("tmr"), kind=RECONCILE_TIMER, run_id=c.run_id,
                step_id=CREATE_TICKET, payload={"operation_id": op.operation_id},
                due_at=now + deps.config.operation_deadline * look / (LOOKS_AGAIN + 1)))
        await runs.commit(conn, RunCommit(
            tenant_id=c.tenant_id, run_id=c.run_id, expected_version=run.state_version, fence=fence(c),
            state=RunState.WAITING, wait_kind=WaitKind.EXTERNAL,
            steps=(StepChange(step_id=CREATE_TICKET, state=StepState.WAITING),),
            events=(EventDraft(type=RunEventType.OPERATION_UNKNOWN, data={"operation_id": op.operation_id}),)), at=now)


async def reconcile(deps: Deps, tenant_id: str, operation_id: str, *, final: bool) -> str:
    """One reconciliation pass; returns what it concluded (for logs and tests)."""
    async with deps.db.reader() as conn:
        op = await operations.get_operation(conn, tenant_id, operation_id)
        run = await runs.get_run(conn, tenant_id, op.run_id)
        step = await steps.get_step(conn, tenant_id, op.run_id, op.step_id)
    deps = deps.for_environment(run.environment)
    if op.fact_state not in operations.IN_DOUBT:
        return "settled"
    if op.handling_state == OperationHandling.MANUAL_REPAIR:
        return "manual_repair"  # already with a person; only evidence closes it
    if _owned_live(step, op, run, now=deps.clock.now()) and not final:
        return "owner_active"
    epoch = await _take_over(deps, run, step, op=op)
    try:
        definitive = await deps.tickets.raise_barrier(tenant_id, namespace(op.run_id), epoch)
    except StaleEpochError:
        return "newer_owner"
    return await _conclude(deps, op, epoch=epoch, definitive=definitive, final=final)


async def _conclude(deps: Deps, op: Operation, *, epoch: int, definitive: bool, final: bool) -> str:
    """Behind the barrier: found -> the fact; not found -> retry/none if definitive, else a person."""
    found = await deps.tickets.find_by_key(op.tenant_id, op.idempotency_key)
    if found is not None:
        await record_receipt(deps, op, found, adopted=True, epoch=epoch)
        await _resume(deps, op.tenant_id, op.run_id)
        return "confirmed"
    if definitive:
        return await _not_created(deps, op)
    if final:
        await _to_manual_repair(deps, op)
        return "manual_repair"
    return "unknown"


def _owned_live(step: Step, op: Operation, run: Run, *, now: datetime) -> bool:
    return (run.state not in TERMINAL_RUN_STATES and step.state == StepState.RUNNING
            and step.owner_epoch == op.owner_epoch and step.lease_until is not None and step.lease_until > now)


async def _take_over(deps: Deps, run: Run, step: Step, *, op: Operation) -> int:
    """An epoch above any writer that may still be in flight: revoke a live claim if needed."""
    if step.state == StepState.RUNNING and step.owner_epoch <= op.owner_epoch:
        async with deps.db.transaction() as conn:
            return await steps.revoke_claim(conn, run.tenant_id, run.run_id, step.step_id, now=deps.clock.now())
    return max(step.owner_epoch, op.owner_epoch + 1)


async def _not_created(deps: Deps, op: Operation) -> str:
    """Nothing was created and nothing older can be: a live run retries, an ended one records it."""
    now = deps.clock.now()
    async with deps.db.transaction() as conn:
        run = await lock_run(conn, op.tenant_id, op.run_id)
        if run.state not in TERMINAL_RUN_STATES:
            return await _resume_in(conn, run, at=now, environment=deps.config.environment) or "retry"
        await operations.move(conn, op, to=OperationFact.CONFIRMED_FAILURE, handling=OperationHandling.NONE, at=now,
                              from_facts=operations.IN_DOUBT)
        await runs.append_events(conn, op.tenant_id, op.run_id, [EventDraft(type=RunEventType.OPERATION_NOT_CREATED,
            data={
            "operation_id": op.operation_id, "late": True})], at=now)
    return "not_created"


async def _resume(deps: Deps, tenant_id: str, run_id: str) -> None:
    async with deps.db.transaction() as conn:
        run = await lock_run(conn, tenant_id, run_id)
        await _resume_in(conn, run, at=deps.clock.now(), environment=deps.config.environment)


async def _resume_in(conn: AsyncConnection, run: Run, *, at: datetime, environment: str) -> str | None:
    """Hand the waiting step back to a worker (READY + wake-up): create_ticket, or complete if
    the verifier was blocked on this Operation. The worker re-reads the fact and finishes."""
    if run.state in TERMINAL_RUN_STATES:
        return None
    plan = {s.step_id: s for s in await steps.list_steps(conn, run.tenant_id, run.run_id)}
    step = plan[CREATE_TICKET] if plan[CREATE_TICKET].state not in FINISHED_STEP_STATES else plan[COMPLETE]
    if step.state in FINISHED_STEP_STATES or step.state in (StepState.READY, StepState.BLOCKED):
        return None
    state = RunState.RUNNING if run.state == RunState.WAITING else None
    await runs.commit(conn, RunCommit(
        tenant_id=run.tenant_id, run_id=run.run_id, expected_version=run.state_version, state=state,
        steps=(StepChange(step_id=step.step_id, state=StepState.READY),),
        events=(EventDraft(type=RunEventType.OPERATION_RESUMED, data={"step_id": step.step_id}),),
        outbox=(step_wakeup(run.tenant_id, run.run_id, step.step_id, kind=step.kind, environment=environment,
                            at=at),)), at=at)
    return "resumed"


async def _to_manual_repair(deps: Deps, op: Operation) -> None:
    now = deps.clock.now()
    summary = f"Ticket creation {op.operation_id} is unknown past its deadline: verify it by key"
    async with deps.db.transaction() as conn:
        await operations.move(conn, op, to=OperationFact.UNKNOWN, handling=OperationHandling.MANUAL_REPAIR, at=now,
                              from_facts=operations.IN_DOUBT)
        item_id = new_id("wi")
        await records.open_work_item(conn, WorkItem(
            work_item_id=item_id, tenant_id=op.tenant_id, kind=MANUAL_REPAIR, run_id=op.run_id,
            state=WorkItemState.OPEN, created_at=now, facts=repair_facts(op, deps.tickets.name), summary=summary))
        run = await lock_run(conn, op.tenant_id, op.run_id)
        await announce(conn, run, kind=NotificationKind.RUN_NEEDS_HUMAN, config=deps.config, at=now,
                       data={"reason": "manual_repair", "summary": summary, "title": run.bindings.get("title"),
                             "work_item_id": item_id})
        state = None if run.state in TERMINAL_RUN_STATES else RunState.WAITING
        drafted = [EventDraft(type=RunEventType.OPERATION_MANUAL_REPAIR, data={"operation_id": op.operation_id})]
        if state is None:
            await runs.append_events(conn, op.tenant_id, op.run_id, drafted, at=now)
            return
        await runs.commit(conn, RunCommit(tenant_id=op.tenant_id, run_id=op.run_id,
                                          expected_version=run.state_version, state=state,
                                          wait_kind=WaitKind.HUMAN_REVIEW, events=tuple(drafted)), at=now)


def repair_facts(op: Operation, system: str) -> dict[str, object]:
    """Everything a person needs: what is known, what is not, where to look, what to ask."""
    return {
        "operation_id": op.operation_id, "kind": op.kind, "fact_state": "unknown", "owner_epoch": op.owner_epoch,
        "idempotency_key": op.idempotency_key, "payload_hash": op.payload_hash, "approval_id": op.approval_id,
        "system": system, "known": "the create was authorized (SUBMITTED) and may have been sent",
        "unknown": "whether the ticket system created the ticket",
        "evidence": {"run": f"/v1/runs/{op.run_id}", "events": f"/v1/runs/{op.run_id}/events",
                     "draft_artifact": op.payload_hash},
        "suggested_query": f"{system}: find the ticket with idempotency key {op.idempotency_key} "
                           f"(builtin: GET /v1/tickets, field idempotency_key)",
    }


async def close_with_note(
    deps: Deps, tenant_id: str, work_item_id: str, *, note: str, external_ref: str | None, principal: str,
) -> tuple[Operation, str]:
    """A person's note kept as the evidence artifact, then :func:`close_manual_repair` — what
    ``POST /v1/work-items/{id}/close`` and Slack's "Close with note" both do. Returns the
    Operation and the note's artifact ref."""
    now = deps.clock.now()
    body = json.dumps({"note": note, "external_ref": external_ref, "by": principal, "at": now.isoformat()},
                      sort_keys=True).encode()
    async with deps.db.transaction() as conn:
        evidence = await store_json(conn, tenant_id, body, config=deps.config, at=now)
    op = await close_manual_repair(deps, tenant_id, work_item_id, evidence_ref=evidence.ref,
                                   external_ref=external_ref, principal=principal)
    return op, evidence.ref


async def close_manual_repair(
    deps: Deps, tenant_id: str, work_item_id: str, *, evidence_ref: str, external_ref: str | None, principal: str,
) -> Operation:
    """A person settles the case, only with evidence (an artifact) of what really happened; a
    run that waited on it resumes from the recorded fact."""
    now = deps.clock.now()
    async with deps.db.transaction() as conn:
        item = await records.get_work_item(conn, tenant_id, work_item_id)
        if item["kind"] != MANUAL_REPAIR or item["state"] != WorkItemState.OPEN:
            raise DomainError(f"work item {work_item_id} is not an open manual repair")
        try:
            await get_artifact(conn, tenant_id, evidence_ref)
        except NotFoundError as exc:
            raise DomainError("closing a manual repair needs evidence: store it as an artifact first") from exc
        op = await operations.get_operation(conn, tenant_id, str(item["facts"]["operation_id"]))
        await lock_run(conn, tenant_id, op.run_id)  # the run's row before the Operation's, as every writer
        fact = OperationFact.CONFIRMED_SUCCESS if external_ref else OperationFact.CONFIRMED_FAILURE
        await operations.move(conn, op, to=fact, external_ref=external_ref, handling=OperationHandling.NONE, at=now)
        await records.close_work_items(conn, tenant_id, op.run_id, kind=MANUAL_REPAIR, at=now, facts={
            **item["facts"], "closed_by": principal, "evidence_ref": evidence_ref, "external_ref": external_ref})
        await runs.append_events(conn, tenant_id, op.run_id, [EventDraft(type=RunEventType.MANUAL_REPAIR_CLOSED, data={
            "operation_id": op.operation_id, "evidence_ref": evidence_ref, "fact_state": fact.value,
            "principal": principal})], at=now)
        await _resume_in(conn, await lock_run(conn, tenant_id, op.run_id), at=now,
                         environment=deps.config.environment)
        return await operations.get_operation(conn, tenant_id, op.operation_id)
