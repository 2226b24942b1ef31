"""C4 in the approval decision's transaction: where this process's intake claims the
``create_ticket`` step that an approval readies, ``record_decision`` records the ticket's intent
and its SUBMITTED permit in the decision's own transaction, and the step's handler goes on from
the permit (three write transactions from the approval to COMPLETED, not four). Should the intent
fail there, the decision commits alone and the step prepares in a transaction of its own."""

from __future__ import annotations

import pytest

from ira.coordinator import operations, ticket
from ira.core.states import OperationFact, RunState, StepState
from ira.runtime.store import runs, steps
from ira.runtime.store.database import Database
from tests.coordinator.test_approvals import waiting_for_approval
from tests.coordinator.test_complete_in_receipt import approve_through_an_intake, attempt_outcomes
from tests.runtime.test_dispatch import counting_transactions


async def one_ticket_and_completed(db: Database, deps, run_id: str) -> list[str]:  # type: ignore[no-untyped-def]
    """The run COMPLETED with one confirmed ticket; returns its event types in order (gapless)."""
    async with db.reader() as conn:
        run = await runs.get_run(conn, "acme", run_id)
        create = await steps.get_step(conn, "acme", run_id, "create_ticket")
        [op] = await operations.list_operations(conn, "acme", run_id)
        events = await runs.list_events(conn, "acme", run_id)
    assert (run.state, run.outcome, create.state) == (RunState.COMPLETED, "ticket_created", StepState.DONE)
    assert (op.fact_state, op.external_ref) == (OperationFact.CONFIRMED_SUCCESS, "INC-1")
    assert len(await deps.tickets.list_tickets("acme")) == 1
    assert [e.run_seq for e in events] == list(range(1, len(events) + 1))
    return [e.type for e in events]


async def test_an_approval_records_the_tickets_intent_in_its_own_transaction(
        db: Database, monkeypatch: pytest.MonkeyPatch) -> None:
    # Given a run waiting for approval
    pump, deps, _, _, run_id, approval = await waiting_for_approval(db)
    await pump.close()
    begun = counting_transactions(db, monkeypatch)
    # When a person approves it (record_decision) while the coordinator's intake takes this process's commits
    await approve_through_an_intake(db, deps, approval, as_people_do=True)
    # Then three write transactions took it to COMPLETED: the approval with the intent and its permit,
    # the ticket system's create, and the receipt with the finish and C6
    assert len(begun) == 3
    log = await one_ticket_and_completed(db, deps, run_id)
    # the step's life as in a transaction of its own: decided, readied, claimed, intended, permitted
    decided = log.index("APPROVAL_APPROVED")
    assert log[decided:decided + 5] == ["APPROVAL_APPROVED", "APPROVAL_CHECKED", "STEP_READY",
                                        "OPERATION_INTENT_RECORDED", "OPERATION_SUBMITTED"]
    assert await attempt_outcomes(db, run_id, "create_ticket") == ["finished"]


async def test_an_intent_that_fails_with_the_decision_does_not_cost_the_decision(
        db: Database, monkeypatch: pytest.MonkeyPatch) -> None:
    # Given a run waiting for approval, and an intent that fails the first time it is prepared
    pump, deps, _, _, run_id, approval = await waiting_for_approval(db)
    await pump.close()
    prepare, failed = ticket._prepare_in, []

    async def fails_once(*args, **kwargs):  # type: ignore[no-untyped-def]
        if not failed:
            failed.append(1)
            raise RuntimeError("the intent failed")
        return await prepare(*args, **kwargs)

    monkeypatch.setattr(ticket, "_prepare_in", fails_once)
    begun = counting_transactions(db, monkeypatch)
    # When a person approves it
    await approve_through_an_intake(db, deps, approval, as_people_do=True)
    # Then the decision went again without the intent and committed, the step prepared on its own,
    # and the run still created one ticket: 1 rolled back + the four of the usual way
    assert failed == [1] and len(begun) == 5
    log = await one_ticket_and_completed(db, deps, run_id)
    assert log.count("APPROVAL_APPROVED") == 1 and log.count("OPERATION_SUBMITTED") == 1
