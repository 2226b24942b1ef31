"""The coordinator's step handlers: join, synthesize, approve_ticket, complete.

Each runs under a claim (the StepDispatcher took the step with a new ``owner_epoch``) and
finishes it with ONE fenced commit that re-reads the run in the same transaction: a stale
owner, a cancelled run or a concurrent change rolls everything back. ``create_ticket``
lives in :mod:`ira.coordinator.ticket`.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import NamedTuple

from sqlalchemy.ext.asyncio import AsyncConnection

from ira.coordinator import gate, records, ticket, verify
from ira.coordinator.chain import chained, then_here
from ira.coordinator.decide import (
    ASSESSED_EVENT,
    DRAFT_ANYWAY,
    BranchOutcome,
    BranchStatus,
    JoinVerdict,
    assess_branch,
    decide_join,
)
from ira.coordinator.deps import Deps
from ira.coordinator.ending import end_run
from ira.coordinator.facts import (
    charge_step,
    fence,
    has_event,
    load_model,
    load_models,
    lock_run,
    lock_run_with_plan,
    on_known_run,
    store_json,
    version_with_draft,
)
from ira.coordinator.notify import announce
from ira.coordinator.report import (
    AcceptedBranch,
    canonical_json,
    compose_draft,
    compose_report,
)
from ira.coordinator.workflow import (
    APPROVE_TICKET,
    COMPLETE,
    CREATE_TICKET,
    CREATE_TICKET_ACTION,
    JOIN,
    SYNTHESIZE,
    PolicyAnswer,
    judge_action,
    latest_attempts,
)
from ira.core.commit import EventDraft, RunCommit, StepChange
from ira.core.delivery import NotificationKind
from ira.core.errors import BudgetExhaustedError, DomainError
from ira.core.events import RunEventType
from ira.core.ids import new_id
from ira.core.investigation import BranchResult
from ira.core.model import Model
from ira.core.operation import WorkItem
from ira.core.report import MissingBranch, Report, TicketDraft
from ira.core.run import Run
from ira.core.states import TERMINAL_RUN_STATES, RunState, StepState, WaitKind, WorkItemState
from ira.runtime.dispatch import StepContext, StepHandler
from ira.runtime.store import runs, steps

log = logging.getLogger(__name__)
Flow = Callable[[Deps, StepContext], Awaitable[None]]


class JoinSummary(Model):
    """The join's result artifact: every branch's outcome, as judged once."""

    verdict: JoinVerdict
    outcomes: tuple[BranchOutcome, ...]


def step_handlers(deps: Deps) -> Mapping[str, StepHandler]:
    """The StepDispatcher's handlers for the coordinator's step kinds."""
    flows: dict[str, Flow] = {JOIN: _optimistic(join), SYNTHESIZE: _optimistic(synthesize),
                              APPROVE_TICKET: _optimistic(approve_ticket), CREATE_TICKET: ticket.create_ticket,
                              COMPLETE: _optimistic(complete)}
    return {kind: _guarded(deps, flow) for kind, flow in flows.items()}


def _guarded(deps: Deps, flow: Flow) -> StepHandler:
    """An exhausted root budget ends the run (``budget_exhausted``) instead of retrying."""

    async def handle(ctx: StepContext) -> None:
        try:
            await flow(deps, ctx)
        except BudgetExhaustedError as exc:
            await _exhausted(deps, ctx, exc)

    return handle


def _optimistic(flow: Callable[[Deps, StepContext, bool], Awaitable[None]]) -> Flow:
    """A one-transaction flow that, where the store lets one writer in at a time (SQLite),
    decides on the run as its claim read it (``StepContext.run``, no read), else reads it under
    lock (:func:`~ira.coordinator.facts.on_known_run`). Only for flows with no effect outside
    their transaction."""

    async def run(deps: Deps, ctx: StepContext) -> None:
        known = ctx.run if deps.db.dialect == "sqlite" else None
        await on_known_run(known, lambda run: flow(deps, ctx, run is not None))

    return run


async def _run_for(conn: AsyncConnection, ctx: StepContext, claimed: bool) -> Run:
    c = ctx.claim
    return ctx.run if claimed else await lock_run(conn, c.tenant_id, c.run_id)


async def _exhausted(deps: Deps, ctx: StepContext, exc: BudgetExhaustedError) -> None:
    now = deps.clock.now()
    async with deps.db.transaction() as conn:
        run = await lock_run(conn, ctx.claim.tenant_id, ctx.claim.run_id)
        if run.state in TERMINAL_RUN_STATES:
            return
        await end_run(conn, run, state=RunState.FAILED, outcome="budget_exhausted", config=deps.config, at=now,
                      detail={"dimension": exc.dimension, "step_id": ctx.claim.step_id})


async def join(deps: Deps, ctx: StepContext, claimed: bool = False) -> None:
    """The branches' outcomes judged once; on PROCEED, synthesize and approve_ticket follow in the
    same transaction (:mod:`ira.coordinator.chain`)."""
    await chained(deps, ctx.claim, lambda conn, then: _join(deps, conn, ctx, claimed, then=then))


async def _join(deps: Deps, conn: AsyncConnection, ctx: StepContext, claimed: bool, *, then: bool) -> None:
    now, c = deps.clock.now(), ctx.claim
    run, plan = (ctx.run, await steps.list_steps(conn, c.tenant_id, c.run_id)) if claimed else \
        await lock_run_with_plan(conn, c.tenant_id, c.run_id)
    branches = latest_attempts(plan)
    results = await load_models(conn, c.tenant_id, (s.result_ref for s in branches), model=BranchResult)
    outcomes = tuple(assess_branch(s, results.get(s.result_ref or "")) for s in branches)
    policy = DRAFT_ANYWAY if await _drafting_anyway(conn, ctx, run) else deps.config.on_required_failure
    verdict = decide_join(outcomes, on_required_failure=policy)
    await charge_step(conn, c, config=deps.config, at=now)
    summary = await store_json(conn, c.tenant_id, canonical_json(JoinSummary(verdict=verdict, outcomes=outcomes)),
                               config=deps.config, at=now)
    events = (*(EventDraft(type=ASSESSED_EVENT[o.status], data=o.model_dump(mode="json")) for o in outcomes),
              EventDraft(type=RunEventType.JOINED, data={"verdict": verdict.value, "summary_ref": summary.ref}))
    if verdict == JoinVerdict.PROCEED:
        await runs.commit(conn, RunCommit(
            tenant_id=c.tenant_id, run_id=c.run_id, expected_version=run.state_version, fence=fence(c),
            steps=(StepChange(step_id=JOIN, state=StepState.DONE, result_ref=summary.ref),), events=events), at=now)
        if then:  # the summary it just wrote is the join's result synthesize reads
            joined = JoinSummary(verdict=verdict, outcomes=outcomes)
            await then_here(conn, c.tenant_id, c.run_id, SYNTHESIZE,
                            lambda next_: _synthesize(deps, conn, next_, next_.run, then=True, joined=joined))
    elif verdict == JoinVerdict.HUMAN_REVIEW:
        await _ask_for_review(conn, ctx, run, outcomes=outcomes, events=events, deps=deps)
    else:
        await end_run(conn, run, state=RunState.FAILED, outcome="required_branch_failed", config=deps.config,
                      at=now, step_states={JOIN: StepState.FAILED}, events=events)


async def _drafting_anyway(conn: AsyncConnection, ctx: StepContext, run: Run) -> bool:
    """Whether a person chose to draft anyway after a failed required branch. That choice
    readies a join that already ran (and asked for the review), so the join's first claim
    (epoch 1) cannot follow it and skips the read."""
    return ctx.claim.owner_epoch > 1 and await has_event(conn, run, RunEventType.REVIEW_DRAFT_ANYWAY)


async def _ask_for_review(
    conn: AsyncConnection, ctx: StepContext, run: Run, *, outcomes: tuple[BranchOutcome, ...],
    events: tuple[EventDraft, ...], deps: Deps,
) -> None:
    """A required branch failed: a person decides (the join step waits, the worker is released)."""
    now, c = deps.clock.now(), ctx.claim
    failed = [o for o in outcomes if o.status == BranchStatus.FAILED]
    summary = f"Required branch {', '.join(o.branch for o in failed)} failed for incident {run.incident_id}"
    item_id = new_id("wi")
    await records.open_work_item(conn, WorkItem(
        work_item_id=item_id, tenant_id=c.tenant_id, kind="human_review", run_id=c.run_id,
        state=WorkItemState.OPEN, created_at=now, summary=summary,
        facts={"failed": [o.model_dump(mode="json") for o in failed]}))
    await announce(conn, run, kind=NotificationKind.RUN_NEEDS_HUMAN, config=deps.config, at=now,
                   data={"reason": "human_review", "summary": summary, "title": run.bindings.get("title"),
                         "work_item_id": item_id})
    await runs.commit(conn, RunCommit(
        tenant_id=c.tenant_id, run_id=c.run_id, expected_version=run.state_version, fence=fence(c),
        state=RunState.WAITING, wait_kind=WaitKind.HUMAN_REVIEW,
        steps=(StepChange(step_id=JOIN, state=StepState.WAITING),), events=events), at=now)


async def synthesize(deps: Deps, ctx: StepContext, claimed: bool = False) -> None:
    """The report (facts apart from hypotheses) and the first version of the ticket draft;
    approve_ticket follows in the same transaction (:mod:`ira.coordinator.chain`)."""
    async def body(conn: AsyncConnection, then: bool) -> None:
        await _synthesize(deps, conn, ctx, await _run_for(conn, ctx, claimed), then=then)

    await chained(deps, ctx.claim, body)


async def _synthesize(deps: Deps, conn: AsyncConnection, ctx: StepContext, run: Run, *, then: bool,
                      joined: JoinSummary | None = None) -> None:
    """``joined``: the join's result, if the caller has it (the join, chained)."""
    now, c = deps.clock.now(), ctx.claim
    report = await _report(conn, run, joined)
    report_ref = await store_json(conn, c.tenant_id, canonical_json(report), config=deps.config, at=now)
    previous, version = await gate.draft_and_version(conn, run)
    draft = compose_draft(report, report_ref=report_ref.ref, tenant_id=c.tenant_id, incident_version=version,
                          redactor=deps.config.redactor)
    draft_ref = await store_json(conn, c.tenant_id, canonical_json(draft), config=deps.config, at=now)
    record = await records.add_draft(conn, c.tenant_id, c.run_id, ref=draft_ref.ref, incident_version=version,
                                     reason="synthesized", at=now, latest=previous.version if previous else 0)
    await charge_step(conn, c, config=deps.config, at=now)
    await runs.commit(conn, RunCommit(
        tenant_id=c.tenant_id, run_id=c.run_id, expected_version=run.state_version, fence=fence(c),
        steps=(StepChange(step_id=SYNTHESIZE, state=StepState.DONE, result_ref=report_ref.ref),),
        events=(EventDraft(type=RunEventType.REPORT_WRITTEN, data={
                    "report_ref": report_ref.ref, "facts": len(report.facts),
                    "hypotheses": len(report.hypotheses), "missing": [m.branch for m in report.missing]}),
                EventDraft(type=RunEventType.DRAFT_WRITTEN, data={"draft_ref": record.ref,
                    "version": record.version}))),
        at=now)
    if then:  # the draft it just wrote is current, and its events leave the incident's version as it read it
        await then_here(conn, c.tenant_id, c.run_id, APPROVE_TICKET, lambda next_: _approve(
            deps, conn, next_, next_.run, known=_Drafted(record, version, draft)))


async def _report(conn: AsyncConnection, run: Run, joined: JoinSummary | None = None) -> Report:
    """Compose the report from what the join accepted (re-read from the artifacts unless ``joined``)."""
    summary = joined
    if summary is None:
        join_step = await steps.get_step(conn, run.tenant_id, run.run_id, JOIN)
        summary = await load_model(conn, run.tenant_id, join_step.result_ref, model=JoinSummary)
    outcomes = summary.outcomes if summary else ()
    results = await load_models(conn, run.tenant_id, (o.result_ref for o in outcomes
                                                      if o.status == BranchStatus.ACCEPTED), model=BranchResult)
    accepted = [AcceptedBranch(branch=o.branch, result_ref=o.result_ref or "", result=result)
                for o in outcomes if o.status == BranchStatus.ACCEPTED
                and (result := results.get(o.result_ref or "")) is not None]
    missing = [MissingBranch(branch=o.branch, reason=o.reason) for o in outcomes if o.status != BranchStatus.ACCEPTED]
    missing += [MissingBranch(branch=str(b), reason=str(r)) for b, r in run.bindings.get("not_planned", {}).items()]
    return compose_report(run_id=run.run_id, bindings=run.bindings, accepted=accepted, missing=missing)


async def approve_ticket(deps: Deps, ctx: StepContext, claimed: bool = False) -> None:
    """Ask policy about create_ticket: ``ask`` waits for a person, ``deny`` ends the run.

    An approval finishes this step in the decision's transaction (:mod:`ira.coordinator.gate`).
    A later claim (one readied by an approval decided before that, or re-claimed after a crash)
    finishes only if an approval still binds the current draft and incident version; otherwise it
    asks again. Its first claim usually runs in synthesize's transaction (:mod:`ira.coordinator.chain`)."""
    async with deps.db.transaction() as conn:
        await _approve(deps, conn, ctx, await _run_for(conn, ctx, claimed))


class _Drafted(NamedTuple):
    """The run's current draft as synthesize just wrote it: no need to read it again."""

    record: records.DraftRecord
    version: int
    """The incident's version for it."""
    document: TicketDraft


async def _approve(deps: Deps, conn: AsyncConnection, ctx: StepContext, run: Run, *,
                   known: _Drafted | None = None) -> None:
    """approve_ticket in the caller's transaction. ``known``: the run's current draft, as the step
    that readied this one (synthesize) left it; then a
    denial is not made here (its run-ending commit is not the step's fenced one, which would end
    the attempt with it): the step makes it on its own."""
    now, c = deps.clock.now(), ctx.claim
    answer = judge_action(run.contract, CREATE_TICKET_ACTION)
    await charge_step(conn, c, config=deps.config, at=now)
    if answer == PolicyAnswer.DENY:
        if known is not None:
            raise DomainError(f"run {c.run_id}: the ticket is denied; the step ends the run on its own")
        await end_run(conn, run, state=RunState.FAILED, outcome="action_blocked", config=deps.config, at=now,
                      step_states={APPROVE_TICKET: StepState.FAILED})
        return
    event: EventDraft | None = EventDraft(type=RunEventType.APPROVAL_NOT_REQUIRED,
        data={"action": CREATE_TICKET_ACTION})
    if answer == PolicyAnswer.ASK:
        event = await _checked_or_ask(conn, ctx, run, deps=deps, known=known)
    if event is None:
        return
    await runs.commit(conn, RunCommit(
        tenant_id=c.tenant_id, run_id=c.run_id, expected_version=run.state_version, fence=fence(c),
        steps=(StepChange(step_id=APPROVE_TICKET, state=StepState.DONE),), events=(event,)), at=now)


async def _checked_or_ask(conn: AsyncConnection, ctx: StepContext, run: Run, *, deps: Deps,
                          known: _Drafted | None = None) -> EventDraft | None:
    """The event that lets the step finish (a still-binding approval), or None: it asked."""
    c = ctx.claim
    draft, version, document = known if known is not None else (
        await records.current_draft(conn, c.tenant_id, c.run_id), None, None)
    if draft is None:
        raise DomainError(f"run {c.run_id} has no ticket draft to approve")
    if version is None:
        version = await version_with_draft(conn, run, draft)
    approval = await gate.usable_approval(conn, run, draft, version=version) if c.owner_epoch > 1 else None
    if approval is None:
        await gate.ask(conn, run, draft, config=deps.config, at=deps.clock.now(), claim=c, version=version,
                       document=document)
        return None
    return EventDraft(type=RunEventType.APPROVAL_CHECKED, data={"approval_id": approval.approval_id,
        "owner_epoch": c.owner_epoch})


async def complete(deps: Deps, ctx: StepContext, claimed: bool = False) -> None:
    """C6 through the one verifier entry point."""
    async with deps.db.transaction() as conn:
        await charge_step(conn, ctx.claim, config=deps.config, at=deps.clock.now())
        await verify.verify_and_complete(conn, ctx.claim, config=deps.config, at=deps.clock.now(),
                                         run=ctx.run if claimed else None)
    deps.faults.hit(verify.AFTER_COMPLETE)
