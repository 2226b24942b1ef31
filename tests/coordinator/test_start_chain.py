"""join -> synthesize -> approve_ticket in one write transaction: where this process's intake
claims the step a coordinator step's commit readies, the readying step runs it in its own
transaction (``ira.coordinator.chain``). Each step still makes its own fenced commit, so the run's
log reads as before. What cannot run there never costs the step before it: that step commits
alone and the next one runs on its own."""

from __future__ import annotations

import asyncio

from sqlalchemy import select, update

from ira.coordinator import records
from ira.coordinator.handlers import step_handlers
from ira.core.budget import ROOT_SCOPE, BudgetDimension
from ira.core.delivery import Notification
from ira.core.report import TicketDraft
from ira.core.run import Run
from ira.core.states import RunState, StepState, WaitKind
from ira.runtime.dispatch import StepDispatcher
from ira.runtime.intake import StepIntake
from ira.runtime.store import runs, steps
from ira.runtime.store.artifacts import get_artifact
from ira.runtime.store.database import Database
from ira.runtime.store.schema import attempts, budget_accounts, deliveries
from tests.coordinator.harness import build, decision, envelope, run_for_incident
from tests.eventually import eventually

CHAIN = ["JOINED", "STEP_READY", "REPORT_WRITTEN", "DRAFT_WRITTEN", "STEP_READY", "APPROVAL_REQUESTED"]


async def started_through_an_intake(db: Database, *, root_steps: int | None = None) -> tuple[Run, StepIntake]:
    """A run started by a decision, its branches run by the harness's pump, while an intake of
    the coordinator's steps takes this process's commits; once the run waits or ended.
    ``root_steps``: the root's step limit from the run's start on (its slices held already)."""
    pump, deps = build(db)
    intake = StepIntake(StepDispatcher(db=db, clock=deps.clock, handlers=step_handlers(deps), owner="eager"), 4)
    d = decision()
    try:
        with intake.eager(db):
            await pump.decide(envelope(d))
            if root_steps is not None:
                async with db.transaction() as conn:
                    await conn.execute(update(budget_accounts).where(
                        budget_accounts.c.tenant_id == "acme", budget_accounts.c.scope == ROOT_SCOPE,
                        budget_accounts.c.dimension == BudgetDimension.STEPS.value).values(limit_amount=root_steps))

            async def settled() -> Run | None:
                await pump.drain()
                run = await run_for_incident(db, d.incident_id)
                done = run is not None and run.state in (RunState.WAITING, RunState.FAILED) and not intake._running
                return run if done else None

            run = await eventually(settled, timeout=30)
            await asyncio.wait_for(intake.drain(), timeout=10)
    finally:
        await pump.close()
    return run, intake


async def attempt_outcomes(db: Database, run_id: str) -> dict[str, list[str | None]]:
    async with db.reader() as conn:
        rows = (await conn.execute(select(attempts.c.step_id, attempts.c.outcome).where(
            attempts.c.run_id == run_id))).all()
    found: dict[str, list[str | None]] = {}
    for step_id, outcome in rows:
        found.setdefault(step_id, []).append(outcome)
    return found


async def test_join_synthesize_and_approve_ticket_commit_together(db: Database) -> None:
    # When a run starts with the coordinator's intake taking this process's commits
    run, intake = await started_through_an_intake(db)
    # Then the join was the only coordinator step started: synthesize and approve_ticket ran in
    # its transaction, each under its own claim, each attempt ended by its own fenced commit
    assert (run.state, run.wait_kind) == (RunState.WAITING, WaitKind.APPROVAL)
    assert (intake.dispatcher.stats.claimed, intake.stats.ran_here) == (1, 2)
    async with db.reader() as conn:
        log = await runs.list_events(conn, "acme", run.run_id)
        plan = {s.step_id: s for s in await steps.list_steps(conn, "acme", run.run_id)}
    types = [e.type for e in log]
    joined = types.index("JOINED")
    assert types[joined:] == CHAIN  # the log a reader sees, as when each step had a transaction of its own
    assert [e.run_seq for e in log] == list(range(1, len(log) + 1))
    assert (plan["join"].state, plan["synthesize"].state, plan["approve_ticket"].state) == (
        StepState.DONE, StepState.DONE, StepState.WAITING)
    assert all(plan[s].owner_epoch == 1 for s in ("join", "synthesize", "approve_ticket"))
    outcomes = await attempt_outcomes(db, run.run_id)
    assert [outcomes[s] for s in ("join", "synthesize", "approve_ticket")] == [["finished"]] * 3
    # and the approval's notification shows the draft as stored (approve_ticket did not read it)
    assert await approval_notice(db, run.run_id) == await stored_draft(db, run.run_id)


async def approval_notice(db: Database, run_id: str) -> dict[str, object]:
    async with db.reader() as conn:
        [ref] = (await conn.execute(select(deliveries.c.payload_ref).where(deliveries.c.run_id == run_id))).scalars()
        _, body = await get_artifact(conn, "acme", ref)
    data = Notification.model_validate_json(body).data
    return {key: data[key] for key in ("title", "severity", "body")}


async def stored_draft(db: Database, run_id: str) -> dict[str, object]:
    async with db.reader() as conn:
        draft = await records.current_draft(conn, "acme", run_id)
        assert draft is not None
        _, body = await get_artifact(conn, "acme", draft.ref)
    request = TicketDraft.model_validate_json(body).request.model_dump(mode="json")
    return {key: request[key] for key in ("title", "severity", "body")}


async def test_a_step_that_cannot_run_there_never_costs_the_one_before(db: Database) -> None:
    # Given a root budget of five steps once the run started: the three branches', the join's and
    # synthesize's, not approve_ticket's
    run, intake = await started_through_an_intake(db, root_steps=5)
    # Then approve_ticket's exhausted budget rolled the chained transactions back, yet join and
    # synthesize each committed (alone), and approve_ticket, run on its own, ended the run for it
    assert intake.stats.ran_here == 0
    assert intake.dispatcher.stats.claimed == 3
    async with db.reader() as conn:
        log = await runs.list_events(conn, "acme", run.run_id)
        plan = {s.step_id: s for s in await steps.list_steps(conn, "acme", run.run_id)}
    types = [e.type for e in log]
    assert (run.state, run.outcome) == (RunState.FAILED, "budget_exhausted")
    assert {"JOINED", "REPORT_WRITTEN", "DRAFT_WRITTEN"} <= set(types) and "APPROVAL_REQUESTED" not in types
    assert (plan["join"].state, plan["synthesize"].state) == (StepState.DONE, StepState.DONE)
    assert [e.run_seq for e in log] == list(range(1, len(log) + 1))
