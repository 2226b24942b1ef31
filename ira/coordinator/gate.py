"""The approval gate of ``create_ticket``: ask, decide, expire, and re-ask for a new draft.

``ask`` is one transaction: the run waits (its worker released), the Approval binds the
draft hash, the incident version, the role and the expiry; a WorkItem, the notification and
a durable expiry timer are written with it. A decision applies only through
:func:`ira.coordinator.approval.judge`; an approval finishes ``approve_ticket`` in the decision's
own transaction (the judgement, under the run lock, is its check) and so readies
``create_ticket``, which is claimed with a new epoch and checks again, under the run lock, that
the approval still binds the current draft and incident version before anything is sent: no
permission from before the wait is reused. An approval asked by ``create_ticket`` itself (the
incident moved on after an approval) makes that step READY again. A staging run under
``coordinator.staging_auto_approve`` is asked like any run and approved at once by ``AUTO_APPROVER``
through the same judgement, in the same transaction.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, TypeVar

import orjson
from opentelemetry.trace import Span
from sqlalchemy import String, bindparam, func, literal_column, select
from sqlalchemy.dialects.postgresql import aggregate_order_by
from sqlalchemy.ext.asyncio import AsyncConnection
from sqlalchemy.sql import Select

from ira.coordinator import records
from ira.coordinator.approval import Choice, DecisionCheck, Judgement, Shown, Verdict, judge, target_state
from ira.coordinator.config import WorkflowConfig
from ira.coordinator.ending import APPROVAL_EXPIRY_TIMER, end_run, expiry_timer_id, invalidate_pending
from ira.coordinator.facts import VERSION_EVENT_TYPES, fence, load_model, store_json, version_of, version_with_draft
from ira.coordinator.notify import APPROVAL_REQUESTED, announce, request_notification
from ira.coordinator.records import DraftRecord
from ira.coordinator.report import canonical_json
from ira.coordinator.schema import ticket_drafts
from ira.coordinator.workflow import APPROVE_TICKET, CREATE_TICKET_ACTION
from ira.core.commit import EventDraft, OutboxMessage, RunCommit, StepChange
from ira.core.delivery import NotificationKind
from ira.core.errors import ConcurrentUpdateError, NotFoundError
from ira.core.events import APPROVAL_SETTLED, RunEventType
from ira.core.ids import new_id
from ira.core.operation import Approval, WorkItem
from ira.core.replay import STAGING
from ira.core.report import TicketDraft
from ira.core.run import Claim, Run
from ira.core.states import ApprovalState, RunState, StepState, WaitKind, WorkItemState
from ira.runtime import runtrace
from ira.runtime.store import outbox, runs, timers
from ira.runtime.store.rows import run_from_row
from ira.runtime.store.schema import approvals, events
from ira.runtime.store.schema import runs as runs_table
from ira.runtime.wakeup import step_wakeup

AUTO_APPROVER = "ira (auto, staging)"
"""Who decided a staging run's approval under ``coordinator.staging_auto_approve``: on the approval,
its event and the replay's comparison, so an auto-granted approval is never mistaken for a person's."""


async def ask(
    conn: AsyncConnection, run: Run, draft: DraftRecord, *, config: WorkflowConfig, at: datetime,
    claim: Claim | None = None, events: Sequence[EventDraft] = (), version: int | None = None,
    document: TicketDraft | None = None,
) -> Approval:
    """WAITING(approval) for ``draft`` and the incident as it is now. ``claim`` is the asking
    step's (approve_ticket; create_ticket if the incident moved on after an approval): that
    step waits, and is the one an approval makes READY again. ``version``: the incident's
    version for ``draft`` (:func:`~ira.coordinator.facts.version_with_draft`) if the caller has it;
    ``document``: ``draft``'s document, if the caller has it (it just composed it)."""
    step_id = claim.step_id if claim else APPROVE_TICKET
    if version is None:
        version = await version_with_draft(conn, run, draft)
    approval = Approval(
        approval_id=new_id("apr"), tenant_id=run.tenant_id, run_id=run.run_id, step_id=step_id,
        action=CREATE_TICKET_ACTION, payload_hash=draft.ref, resource_version=version,
        required_role=config.approver_role, state=ApprovalState.PENDING, expires_at=at + config.approval_expiry,
        created_at=at)
    await _record_request(conn, run, approval, draft=draft, at=at)
    message = await request_notification(conn, run, kind=APPROVAL_REQUESTED, config=config, at=at,
                                         data=await _approval_data(conn, run, approval, draft=draft,
                                                                   document=document))
    await runs.commit(conn, RunCommit(
        tenant_id=run.tenant_id, run_id=run.run_id, expected_version=run.state_version, state=RunState.WAITING,
        wait_kind=WaitKind.APPROVAL, fence=fence(claim) if claim else None,
        steps=(StepChange(step_id=step_id, state=StepState.WAITING),) if claim else (),
        events=(*events, EventDraft(type=RunEventType.APPROVAL_REQUESTED, data={
            "approval_id": approval.approval_id, "payload_hash": draft.ref, "draft_version": draft.version,
            "resource_version": approval.resource_version, "required_role": approval.required_role,
            "expires_at": approval.expires_at.isoformat()})),
        outbox=(message,)), at=at)
    if config.staging_auto_approve and run.environment == STAGING:
        approval, _ = await decide(conn, run.tenant_id, approval.approval_id, choice=Choice.APPROVE,
                                   principal=AUTO_APPROVER, roles=frozenset({approval.required_role}),
                                   reason="coordinator.staging_auto_approve", config=config, at=at)
    return approval


async def _record_request(conn: AsyncConnection, run: Run, approval: Approval, *, draft: DraftRecord,
                          at: datetime) -> None:
    """The Approval, a person's WorkItem and the durable expiry timer."""
    await records.insert_approval(conn, approval)
    await records.open_work_item(conn, WorkItem(
        work_item_id=new_id("wi"), tenant_id=run.tenant_id, kind="approval", run_id=run.run_id,
        state=WorkItemState.OPEN, created_at=at, summary=f"Approve ticket draft v{draft.version} for "
        f"incident {run.incident_id}", facts={"approval_id": approval.approval_id, "draft_ref": draft.ref}))
    await timers.schedule_timer(conn, timers.Timer(
        tenant_id=run.tenant_id, timer_id=expiry_timer_id(approval.approval_id), kind=APPROVAL_EXPIRY_TIMER,
        due_at=approval.expires_at, run_id=run.run_id, step_id=APPROVE_TICKET,
        payload={"approval_id": approval.approval_id}))


async def _approval_data(conn: AsyncConnection, run: Run, approval: Approval, *,
                         draft: DraftRecord, document: TicketDraft | None = None) -> dict[str, object]:
    doc = document or await load_model(conn, run.tenant_id, draft.ref, model=TicketDraft)
    content = doc.request.model_dump(mode="json") if doc else {}
    return {"approval_id": approval.approval_id, "incident_id": run.incident_id, "draft_ref": draft.ref,
            "draft_version": draft.version, "expires_at": approval.expires_at.isoformat(),
            "required_role": approval.required_role, "decision_path": f"/v1/approvals/{approval.approval_id}/decision",
            "title": content.get("title"), "severity": content.get("severity"), "body": content.get("body")}


async def decide(
    conn: AsyncConnection, tenant_id: str, approval_id: str, *, choice: Choice, principal: str,
    roles: frozenset[str], reason: str | None, config: WorkflowConfig, at: datetime, shown: Shown | None = None,
) -> tuple[Approval, Judgement]:
    """Judge and, if it may, apply one decision; a refusal is recorded on the run's log.
    ``shown``: the draft the decider saw (a chat button's binding), which must be the approval's."""
    decided = await decide_in_view(conn, tenant_id, approval_id, choice=choice, principal=principal, roles=roles,
                                   reason=reason, config=config, at=at, shown=shown)
    return decided.approval, decided.judgement


@dataclass(frozen=True)
class Decided:
    """:func:`decide_in_view`'s answer: the approval as decided, the judgement, and the run's
    :class:`ApprovalView` as this transaction now holds it (the decided approval in it)."""

    approval: Approval
    judgement: Judgement
    view: ApprovalView


async def decide_in_view(
    conn: AsyncConnection, tenant_id: str, approval_id: str, *, choice: Choice, principal: str,
    roles: frozenset[str], reason: str | None, config: WorkflowConfig, at: datetime, shown: Shown | None = None,
) -> Decided:
    """:func:`decide`, with the approval view it judged against as the decision left it: what
    the rest of this transaction would read again (the ticket's permit in the decision's own
    transaction, ``ticket.prepare_with_decision``). The decision writes no draft and no
    incident version, and the run stays locked until the transaction ends, so the view holds
    until then; a later transaction reads its own."""
    run = await _locked(conn, tenant_id, approval_id)
    view = await approval_view(conn, run)
    approval, draft, version = view.approval(approval_id), view.draft, view.version
    judgement = judge(DecisionCheck(
        approval=approval, choice=choice, principal=principal, roles=roles, now=at,
        current_draft_ref=draft.ref if draft else None, current_resource_version=version,
        run_waiting_for_approval=run.state == RunState.WAITING and run.wait_kind == WaitKind.APPROVAL, shown=shown))
    if judgement.verdict == Verdict.REFUSE:
        await runs.append_events(conn, tenant_id, run.run_id,
            [EventDraft(type=RunEventType.APPROVAL_DECISION_REFUSED, data={
            "approval_id": approval_id, "principal": principal, "decision": choice.value,
            "code": judgement.code, "message": judgement.message})], at=at)
    if judgement.verdict != Verdict.APPLY:
        return Decided(approval, judgement, view)
    if not await records.settle_approval(conn, approval, target_state(choice), at=at, by=principal, reason=reason):
        raise ConcurrentUpdateError(f"approval {approval_id} was decided concurrently")
    await timers.cancel_timer(conn, tenant_id, expiry_timer_id(approval_id), now=at)
    with _wait_span(run, approval, outcome=target_state(choice).value, principal=principal):
        await _apply(conn, run, approval, choice=choice, principal=principal, config=config, at=at)
    # what settle_approval wrote, under the run lock: no need to read it back
    settled = approval.model_copy(update={"state": target_state(choice), "decided_by": principal, "decided_at": at,
                                          "reason": reason})
    return Decided(settled, judgement, view.with_approval(settled))


def _wait_span(run: Run, approval: Approval, *, outcome: str, principal: str | None) -> AbstractContextManager[Span]:
    """The wait for a person, as one span of the run's trace from the request to the decision;
    the decision's own request (HTTP, Slack) stays its own trace and is linked."""
    attributes = {"ira.run_id": run.run_id, "ira.approval_id": approval.approval_id, "ira.approval.outcome": outcome,
                  "ira.approval.required_role": approval.required_role, "ira.approval.action": approval.action}
    if principal:
        attributes["ira.approval.decider"] = principal
    return runtrace.run_span("approval wait", run.traceparent, start_time=approval.created_at, attributes=attributes)


async def _apply(
    conn: AsyncConnection, run: Run, approval: Approval, *, choice: Choice, principal: str,
    config: WorkflowConfig, at: datetime,
) -> None:
    decided = EventDraft(type=APPROVAL_SETTLED[target_state(choice)], data={
        "approval_id": approval.approval_id, "principal": principal, "payload_hash": approval.payload_hash,
        "resource_version": approval.resource_version})
    await records.close_work_items(conn, run.tenant_id, run.run_id, kind="approval", at=at)
    told = await request_notification(conn, run, kind=NotificationKind.APPROVAL_DECIDED, config=config, at=at,
                                      data={"approval_id": approval.approval_id, "decision": choice.value,
                                            "principal": principal})
    if choice == Choice.REJECT:
        await outbox.enqueue(conn, runtrace.stamp((told,), runtrace.parent_for(run.traceparent)), at=at)
        await end_run(conn, run, state=RunState.FAILED, outcome="approval_rejected", config=config, at=at,
                      step_states={approval.step_id: StepState.FAILED}, events=(decided,))
        return
    if approval.step_id == APPROVE_TICKET:
        await runs.commit(conn, _finished_by(run, approval, decided=decided, told=told), at=at)
        return
    wakeup = step_wakeup(run.tenant_id, run.run_id, approval.step_id, kind=approval.step_id,
                         environment=config.environment, at=at)
    await runs.commit(conn, RunCommit(  # the notification's outbox row with the wake-up's: one INSERT
        tenant_id=run.tenant_id, run_id=run.run_id, expected_version=run.state_version, state=RunState.RUNNING,
        steps=(StepChange(step_id=approval.step_id, state=StepState.READY),), events=(decided,),
        outbox=(told, wakeup)), at=at)


def _finished_by(run: Run, approval: Approval, *, decided: EventDraft, told: OutboxMessage) -> RunCommit:
    """``approve_ticket`` DONE in the decision's own commit: the judgement just made under the run
    lock (role, expiry, draft hash and incident version all still match) is the check its second
    claim used to repeat, so the step is not claimed again. The commit's promotions make
    ``create_ticket`` READY (its wake-up in the same outbox INSERT as the notification's); that step
    is claimed with its own new epoch and reads the approval again under the run lock before it
    may send (``ticket.dispatch_problem``): nothing from before the wait is reused as permission."""
    return RunCommit(
        tenant_id=run.tenant_id, run_id=run.run_id, expected_version=run.state_version, state=RunState.RUNNING,
        steps=(StepChange(step_id=APPROVE_TICKET, state=StepState.DONE),),
        events=(decided, EventDraft(type=RunEventType.APPROVAL_CHECKED, data={
            "approval_id": approval.approval_id, "by": "decision"})),
        outbox=(told,))


async def usable_approval(conn: AsyncConnection, run: Run, draft: DraftRecord, *, version: int | None = None
                          ) -> Approval | None:
    """An APPROVED approval that still binds the current ``draft`` and incident ``version`` (read
    here unless the caller has it)."""
    if version is None:
        version = await version_with_draft(conn, run, draft)
    return _usable(await records.list_approvals(conn, run.tenant_id, run.run_id), draft, version)


def _usable(approvals: Sequence[Approval], draft: DraftRecord, version: int) -> Approval | None:
    usable = [a for a in approvals
              if a.state == ApprovalState.APPROVED and a.payload_hash == draft.ref and a.resource_version == version]
    return usable[-1] if usable else None


@dataclass(frozen=True)
class ApprovalView:
    """What a run's approvals are judged against, as read under the run's lock: its current
    draft, the incident version that draft binds to, and every approval (oldest first)."""

    draft: DraftRecord | None
    version: int
    approvals: tuple[Approval, ...]

    def approval(self, approval_id: str) -> Approval:
        for approval in self.approvals:
            if approval.approval_id == approval_id:
                return approval
        raise NotFoundError(f"approval {approval_id} not found")

    def usable(self) -> Approval | None:
        """:func:`usable_approval` of the current draft (None without one)."""
        return _usable(self.approvals, self.draft, self.version) if self.draft is not None else None

    def with_approval(self, approval: Approval) -> ApprovalView:
        """This view with ``approval`` in place of the one of its id (as settled in this transaction)."""
        return ApprovalView(self.draft, self.version, tuple(
            approval if a.approval_id == approval.approval_id else a for a in self.approvals))


async def approval_view(conn: AsyncConnection, run: Run) -> ApprovalView:
    """The run's :class:`ApprovalView`; the caller holds the run's lock. On PostgreSQL one
    statement (``_APPROVAL_VIEW``) instead of three reads, a statement of its own after the
    lock: in the locking statement itself, a writer waited for would be seen only on the
    locked row (PostgreSQL re-reads that one), the draft and approvals as they were before the
    wait."""
    if conn.dialect.name != "postgresql":
        draft = await records.current_draft(conn, run.tenant_id, run.run_id)
        return ApprovalView(draft, await version_with_draft(conn, run, draft),
                            tuple(await records.list_approvals(conn, run.tenant_id, run.run_id)))
    row = (await conn.execute(_APPROVAL_VIEW, {"k_tenant": run.tenant_id, "k_run": run.run_id})).one()
    draft = _draft_of(row)
    return ApprovalView(draft, version_of(run, draft, _logged(row)),
                        tuple(_utc(Approval.model_validate(a)) for a in _json(row.approvals) or ()))


def _json(value: Any) -> Any:
    """A JSON column of ``_APPROVAL_VIEW`` as asyncpg answers it (text) or decoded already."""
    return orjson.loads(value) if isinstance(value, str | bytes) else value


_R = TypeVar("_R", DraftRecord, Approval)


def _utc(record: _R) -> _R:
    """JSON spells a timestamp in the session's time zone; the store hands out UTC (``UtcDateTime``)."""
    return record.model_copy(update={name: value.astimezone(UTC) for name, value in record
                                     if isinstance(value, datetime)})


async def draft_and_version(conn: AsyncConnection, run: Run) -> tuple[DraftRecord | None, int]:
    """The run's current draft and the incident version it binds to (``facts.incident_version``):
    on PostgreSQL in one statement (``_DRAFT_VIEW``, a round trip fewer on synthesize's way),
    else two reads."""
    if conn.dialect.name != "postgresql":
        draft = await records.current_draft(conn, run.tenant_id, run.run_id)
        return draft, await version_with_draft(conn, run, draft)
    row = (await conn.execute(_DRAFT_VIEW, {"k_tenant": run.tenant_id, "k_run": run.run_id})).one()
    draft = _draft_of(row)
    return draft, version_of(run, draft, _logged(row))


def _draft_of(row: Any) -> DraftRecord | None:
    """The ``draft`` column of ``_DRAFT_VIEW`` or ``_APPROVAL_VIEW`` as a record."""
    draft_row = _json(row.draft)
    return _utc(DraftRecord.model_validate(draft_row)) if draft_row is not None else None


def _logged(row: Any) -> list[tuple[str, Any]]:
    """The ``versions`` column (the version events' type and data)."""
    return [(type_, data) for type_, data in _json(row.versions) or ()]


def _views() -> tuple[Select[Any], Select[Any]]:
    """PostgreSQL: the run's version events (type, data) and current draft (``row_to_json``) as
    two JSON columns of one row (``_DRAFT_VIEW``), and with its approvals (oldest first) as a
    third (``_APPROVAL_VIEW``)."""
    tenant, run_id = bindparam("k_tenant", type_=String), bindparam("k_run", type_=String)
    logged = events.alias("logged")
    versions = select(func.json_agg(func.json_build_array(logged.c.type, logged.c.data))).where(
        logged.c.tenant_id == tenant, logged.c.run_id == run_id,
        logged.c.type.in_(VERSION_EVENT_TYPES)).scalar_subquery()
    newest = select(ticket_drafts).where(ticket_drafts.c.tenant_id == tenant,
                                         ticket_drafts.c.run_id == run_id) \
        .order_by(ticket_drafts.c.version.desc()).limit(1).subquery("newest")
    draft = select(func.row_to_json(literal_column("newest"))).select_from(newest).scalar_subquery()
    asked = select(approvals).where(approvals.c.tenant_id == tenant, approvals.c.run_id == run_id) \
        .subquery("asked")
    every = select(func.json_agg(aggregate_order_by(literal_column("asked"), asked.c.created_at,
                                                    asked.c.approval_id))).select_from(asked).scalar_subquery()
    drafted = select(versions.label("versions"), draft.label("draft"))
    return drafted, drafted.add_columns(every.label("approvals"))


_DRAFT_VIEW, _APPROVAL_VIEW = _views()


async def _locked(conn: AsyncConnection, tenant_id: str, approval_id: str) -> Run:
    """The run locked first: every approval writer holds the run lock, so what is read after it
    cannot change before this transaction commits. The run is found through the approval in
    the locking statement itself (one read fewer than looking it up)."""
    row = (await conn.execute(_LOCK_RUN_OF_APPROVAL, {"k_tenant": tenant_id, "k_approval": approval_id})).first()
    if row is None:
        raise NotFoundError(f"approval {approval_id} not found")
    return run_from_row(row)


_LOCK_RUN_OF_APPROVAL = select(runs_table).where(
    runs_table.c.tenant_id == bindparam("k_tenant"),
    runs_table.c.run_id == select(approvals.c.run_id).where(
        approvals.c.tenant_id == bindparam("k_tenant"), approvals.c.approval_id == bindparam("k_approval"))
    .scalar_subquery()).with_for_update()


async def expire(conn: AsyncConnection, tenant_id: str, approval_id: str, *, config: WorkflowConfig,
                 at: datetime) -> bool:
    """The expiry timer fired: no decision came in time, so the run ends without a ticket."""
    run = await _locked(conn, tenant_id, approval_id)
    approval = await records.get_approval(conn, tenant_id, approval_id)
    if approval.state != ApprovalState.PENDING or at < approval.expires_at:
        return False
    await records.settle_approval(conn, approval, ApprovalState.EXPIRED, at=at, reason="expired")
    if run.state != RunState.WAITING:
        return True
    with _wait_span(run, approval, outcome=ApprovalState.EXPIRED.value, principal=None):
        await _expired(conn, run, approval, config=config, at=at)
    return True


async def _expired(conn: AsyncConnection, run: Run, approval: Approval, *, config: WorkflowConfig,
                   at: datetime) -> None:
    approval_id = approval.approval_id
    await end_run(conn, run, state=RunState.FAILED, outcome="approval_expired", config=config, at=at,
                  step_states={approval.step_id: StepState.FAILED}, detail={"approval_id": approval_id},
                  events=(EventDraft(type=RunEventType.APPROVAL_EXPIRED, data={"approval_id": approval_id}),))
    await announce(conn, run, kind=NotificationKind.APPROVAL_EXPIRED, config=config, at=at,
                   data={"approval_id": approval_id, "title": run.bindings.get("title")})


async def revise(
    conn: AsyncConnection, run: Run, *, reason: str, config: WorkflowConfig, at: datetime,
    new_version: int | None = None, edit: dict[str, str] | None = None, note: str | None = None,
) -> Approval | None:
    """A new draft version (new evidence or a human edit) needs a new approval; the old one
    is invalidated and can never authorize it. Only while the run waits for approval."""
    if run.state != RunState.WAITING or run.wait_kind != WaitKind.APPROVAL:
        return None
    current = await records.current_draft(conn, run.tenant_id, run.run_id)
    doc = await load_model(conn, run.tenant_id, current.ref if current else None, model=TicketDraft)
    if current is None or doc is None:
        return None
    version = new_version or current.incident_version
    body = doc.request.body + (f"\n\n## Update (incident version {version})\n- {note}" if note else "")
    request = doc.request.model_copy(update={"body": body, **(edit or {})})
    request = request.model_copy(update={"title": config.redactor.text(request.title),
                                         "body": config.redactor.text(request.body)})
    revised = doc.model_copy(update={"request": request, "incident_version": version})
    ref = await store_json(conn, run.tenant_id, canonical_json(revised), config=config, at=at)
    draft = await records.add_draft(conn, run.tenant_id, run.run_id, ref=ref.ref, incident_version=version,
                                    reason=reason, at=at, latest=current.version)
    invalidated = await invalidate_pending(conn, run, reason=reason, at=at)
    await records.close_work_items(conn, run.tenant_id, run.run_id, kind="approval", at=at)
    revised_event = EventDraft(type=RunEventType.DRAFT_REVISED, data={"draft_ref": draft.ref, "version": draft.version,
                                                           "reason": reason, "incident_version": version})
    return await ask(conn, run, draft, config=config, at=at, events=(revised_event, *invalidated))
