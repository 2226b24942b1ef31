"""C6 in the ticket receipt's transaction: where this process's intake claims the ``complete``
step that the receipt's finish readies, the run is verified and COMPLETED in that same
transaction (four write transactions from the approval to COMPLETED, not five). What cannot
complete there (an exhausted budget, a failed check) never costs the receipt: the finish commits
alone and the step runs on its own."""

from __future__ import annotations

import asyncio

import pytest
from sqlalchemy import select, update

from ira.coordinator import gate, operations
from ira.coordinator.approval import Choice
from ira.coordinator.decisions import record_decision
from ira.coordinator.handlers import step_handlers
from ira.core.budget import ROOT_SCOPE, BudgetDimension
from ira.core.states import OperationFact, RunState, StepState
from ira.runtime.dispatch import StepDispatcher
from ira.runtime.intake import StepIntake
from ira.runtime.store import runs, steps
from ira.runtime.store.database import Database
from ira.runtime.store.schema import attempts, budget_accounts
from tests.coordinator.harness import T0
from tests.coordinator.test_approvals import waiting_for_approval
from tests.eventually import eventually
from tests.runtime.test_dispatch import counting_transactions


async def approve_through_an_intake(db: Database, deps, approval, *,  # type: ignore[no-untyped-def]
                                    as_people_do: bool = False) -> StepIntake:
    """Approve while an intake of the coordinator's steps takes this process's commits; return
    once the run ended and the intake is idle. ``as_people_do``: through ``record_decision`` (the
    API's, the dashboard's and Slack's way, which records the ticket's intent with the decision),
    else ``gate.decide`` alone in one transaction."""
    intake = StepIntake(StepDispatcher(db=db, clock=deps.clock, handlers=step_handlers(deps), owner="eager"), 4)
    with intake.eager(db):
        if as_people_do:
            await record_decision(deps, tenant_id="acme", approval_id=approval.approval_id, choice=Choice.APPROVE,
                                  principal="lead", roles=frozenset({approval.required_role}))
        else:
            async with db.transaction() as conn:
                await gate.decide(conn, "acme", approval.approval_id, choice=Choice.APPROVE, principal="lead",
                                  roles=frozenset({approval.required_role}), reason=None, config=deps.config, at=T0)

        async def ended() -> bool:
            async with db.reader() as conn:
                run = await runs.get_run(conn, "acme", approval.run_id)
            return run.state in (RunState.COMPLETED, RunState.FAILED) and not intake._running

        await eventually(ended, timeout=20)
        await asyncio.wait_for(intake.drain(), timeout=10)
    return intake


async def attempt_outcomes(db: Database, run_id: str, step_id: str) -> list[str | None]:
    async with db.reader() as conn:
        return list((await conn.execute(select(attempts.c.outcome).where(
            attempts.c.run_id == run_id, attempts.c.step_id == step_id))).scalars())


async def test_an_approved_run_completes_in_the_receipts_transaction(
        db: Database, monkeypatch: pytest.MonkeyPatch) -> None:
    # Given a run waiting for approval
    pump, deps, _, _, run_id, approval = await waiting_for_approval(db)
    await pump.close()
    begun = counting_transactions(db, monkeypatch)
    # When it is approved with the coordinator's intake taking this process's commits
    intake = await approve_through_an_intake(db, deps, approval)
    # Then four write transactions took it to COMPLETED: the approval (which claims create_ticket),
    # the intent with its permit, the ticket system's create, and the receipt with the finish and C6
    assert len(begun) == 4
    assert (intake.stats.ran_here, intake.dispatcher.stats.claimed) == (1, 1)  # complete: never started
    async with db.reader() as conn:
        run = await runs.get_run(conn, "acme", run_id)
        complete = await steps.get_step(conn, "acme", run_id, "complete")
        [op] = await operations.list_operations(conn, "acme", run_id)
        log = [e.type for e in await runs.list_events(conn, "acme", run_id)]
        seqs = [e.run_seq for e in await runs.list_events(conn, "acme", run_id)]
    assert (run.state, run.outcome, complete.state) == (RunState.COMPLETED, "ticket_created", StepState.DONE)
    assert (op.fact_state, op.external_ref) == (OperationFact.CONFIRMED_SUCCESS, "INC-1")
    # the step's life as it was in a transaction of its own: readied, claimed, finished
    confirmed = log.index("OPERATION_CONFIRMED")
    assert log[confirmed:] == ["OPERATION_CONFIRMED", "TICKET_CREATED", "STEP_READY", "RUN_COMPLETED"]
    assert seqs == list(range(1, len(seqs) + 1))
    assert await attempt_outcomes(db, run_id, "complete") == ["finished"]


async def test_a_run_that_cannot_complete_there_still_keeps_its_receipt(db: Database) -> None:
    # Given a run waiting for approval whose step budget has room for create_ticket only
    pump, deps, _, _, run_id, approval = await waiting_for_approval(db)
    await pump.close()
    async with db.transaction() as conn:
        await conn.execute(update(budget_accounts).where(
            budget_accounts.c.run_id == run_id, budget_accounts.c.scope == ROOT_SCOPE,
            budget_accounts.c.dimension == BudgetDimension.STEPS.value,
        ).values(limit_amount=budget_accounts.c.settled + budget_accounts.c.reserved + 1))
    # When it is approved with the coordinator's intake taking this process's commits
    intake = await approve_through_an_intake(db, deps, approval)
    # Then C6 did not go in the receipt's transaction, yet the receipt and the finish committed, and
    # the complete step, run on its own, ended the run for the budget
    assert intake.stats.ran_here == 0
    async with db.reader() as conn:
        run = await runs.get_run(conn, "acme", run_id)
        ticket_step = await steps.get_step(conn, "acme", run_id, "create_ticket")
        [op] = await operations.list_operations(conn, "acme", run_id)
        log = await runs.list_events(conn, "acme", run_id)
    assert (op.fact_state, op.external_ref) == (OperationFact.CONFIRMED_SUCCESS, "INC-1")
    assert ticket_step.state == StepState.DONE and "TICKET_CREATED" in [e.type for e in log]
    assert (run.state, run.outcome) == (RunState.FAILED, "budget_exhausted")
    assert "RUN_COMPLETED" not in [e.type for e in log]
    assert [e.run_seq for e in log] == list(range(1, len(log) + 1))
