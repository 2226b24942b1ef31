"""Cancel: no new claims, running branches stop, in-flight Operations stay under
reconciliation with late facts recorded, and CANCELLED never returns to RUNNING."""

from __future__ import annotations

import asyncio

import pytest
from sqlalchemy import select

from ira.connectors.tickets.builtin import BuiltinTicketSystem
from ira.connectors.tickets.schema import ticket_barriers
from ira.coordinator import operations
from ira.coordinator.intake import open_run_for
from ira.coordinator.receipt import namespace
from ira.core.clock import FrozenClock
from ira.core.commit import EventDraft, Fence, RunCommit, StepChange
from ira.core.errors import IllegalTransitionError, StaleEpochError
from ira.core.events import RunEventType
from ira.core.states import OperationFact, OperationHandling, RunState, StepState
from ira.runtime.scanner import Scanner
from ira.runtime.store import runs, steps
from ira.runtime.store.database import Database
from ira.runtime.wakeup import step_wakeup
from tests.coordinator.gated import GatedTickets
from tests.coordinator.harness import T0, api, auth, build, decision, envelope
from tests.coordinator.test_approvals import decide, waiting_for_approval
from tests.eventually import eventually


async def test_cancel_while_a_branch_runs_stops_it_and_refuses_new_claims(db: Database) -> None:
    # Given a run whose metrics branch is running (and would run forever)
    pump, deps = build(db, behaviour={"metrics": "hang"}, lease=0.3)
    d = decision()
    await pump.decide(envelope(d))
    await pump.drain()
    async with db.reader() as conn:
        run = await open_run_for(conn, "acme", d.incident_id)
        running = await steps.get_step(conn, "acme", run.run_id, "metrics")
    assert running.state == StepState.RUNNING and pump.scripted.hanging
    # When a person cancels it (twice)
    async with api(deps) as client:
        first = await client.post(f"/v1/runs/{run.run_id}/cancel", headers=auth("lead"), json={"reason": "noise"})
        again = await client.post(f"/v1/runs/{run.run_id}/cancel", headers=auth("lead"))
        viewer = await client.post(f"/v1/runs/{run.run_id}/cancel", headers=auth("viewer"))
    # Then the branch's heartbeat fails and its handler is cancelled
    await eventually(lambda: not pump.scripted.hanging, timeout=10, message="hung branch stopped")
    assert (first.status_code, first.json()["state"], again.status_code) == (202, "cancelled", 202)
    assert viewer.status_code == 403
    async with db.reader() as conn:
        after = await runs.get_run(conn, "acme", run.run_id)
        plan = {s.step_id: s for s in await steps.list_steps(conn, "acme", run.run_id)}
    assert after.state == RunState.CANCELLED
    assert {s.state for s in plan.values()} == {StepState.DONE, StepState.SKIPPED}
    assert plan["metrics"].owner_epoch == running.owner_epoch + 1
    # And nothing can claim, commit late, or bring the run back
    await pump.dispatchers[1].handle_wakeup(step_wakeup("acme", run.run_id, "metrics", kind="metrics",
                                                        environment="prod", at=T0).envelope)
    with pytest.raises(StaleEpochError):
        await _late_commit(db, run.run_id, "metrics", running.owner_epoch)
    with pytest.raises(IllegalTransitionError):
        async with db.transaction() as conn:
            await runs.commit(conn, RunCommit(tenant_id="acme", run_id=run.run_id, expected_version=after.state_version,
                                              state=RunState.RUNNING), at=T0)
    await pump.close()


@pytest.mark.parametrize("hold", ["after", "before"])
async def test_cancel_while_the_ticket_operation_is_submitted_keeps_reconciling(db: Database, hold: str) -> None:
    # Given an approved run whose ticket create is in flight (receipt not back / request not arrived)
    clock = FrozenClock(T0)
    gated = GatedTickets(BuiltinTicketSystem(db, clock), hold=hold)
    pump, deps, clock, _, run_id, approval = await waiting_for_approval(db, tickets=gated)
    async with api(deps) as client:
        assert (await decide(client, approval.approval_id)).status_code == 200
        draining = asyncio.create_task(pump.drain())
        await asyncio.wait_for(gated.entered.wait(), timeout=10)
        async with db.reader() as conn:
            op = await operations.for_step(conn, "acme", run_id, step_id="create_ticket")
        assert op is not None and op.fact_state == OperationFact.SUBMITTED
        # When the run is cancelled while the Operation is SUBMITTED
        assert (await client.post(f"/v1/runs/{run_id}/cancel", headers=auth("admin"))).status_code == 202
        await Scanner(db=db, clock=clock, environment="prod").scan_once()  # the reconcile timer is due now

        async def reconciling() -> bool:
            """Deliver until the cancel's reconciliation raised the ticket system's barrier. (Its
            OPERATION_RECONCILING event is written by the cancel itself, and the timer may be
            delivered by the draining task instead: the barrier is what the gate must wait for.)"""
            await pump._deliver_batch()
            async with db.reader() as conn:
                epoch = (await conn.execute(select(ticket_barriers.c.epoch).where(
                    ticket_barriers.c.tenant_id == "acme", ticket_barriers.c.namespace == namespace(run_id)))).scalar()
            return epoch is not None and epoch > op.owner_epoch

        await eventually(reconciling, timeout=20, message="reconciliation ran before the gate opens")
        gated.release.set()
        await asyncio.wait_for(draining, timeout=20)
        tickets = (await client.get("/v1/tickets", headers=auth("viewer"))).json()["tickets"]
    await pump.close()
    async with db.reader() as conn:
        op = await operations.get_operation(conn, "acme", op.operation_id)
        run = await runs.get_run(conn, "acme", run_id)
        log = [e.type for e in await runs.list_events(conn, "acme", run_id)]
    # Then the run stays CANCELLED and the Operation's real outcome is recorded after the cancel
    assert run.state == RunState.CANCELLED and "RUN_STARTED" not in log[log.index("RUN_CANCELLED"):]
    assert "OPERATION_RECONCILING" in log and op.handling_state == OperationHandling.NONE
    if hold == "after":  # the ticket exists: the late fact is recorded, never a second ticket
        assert (op.fact_state, op.external_ref, [t["key"] for t in tickets]) == (
            OperationFact.CONFIRMED_SUCCESS, "INC-1", ["INC-1"])
        assert log.index("OPERATION_CONFIRMED") > log.index("RUN_CANCELLED")
    else:  # the barrier came first: the in-flight create is refused, and that is recorded
        assert (op.fact_state, tickets, gated.outcomes) == (OperationFact.CONFIRMED_FAILURE, [], ["StaleEpochError"])
        assert log.index("OPERATION_NOT_CREATED") > log.index("RUN_CANCELLED")


async def _late_commit(db: Database, run_id: str, step_id: str, epoch: int) -> None:
    async with db.transaction() as conn:
        run = await runs.get_run(conn, "acme", run_id)
        await runs.commit(conn, RunCommit(
            tenant_id="acme", run_id=run_id, expected_version=run.state_version,
            fence=Fence(step_id=step_id, owner_epoch=epoch),
            steps=(StepChange(step_id=step_id, state=StepState.DONE),),
                events=(EventDraft(type=RunEventType.BRANCH_FINISHED),)), at=T0)
