"""A receipt recorded on its own (reconciliation, or a finish the run refused) takes the run's
row lock before it touches the Operation, as every other writer of both does (``lock_run``,
then the Operation). It took them the other way round: the Operation's row in ``confirm``, the
run's row in ``append_events``' UPDATE, so a cancel's reconciliation that held the run and
wanted the Operation deadlocked with it on PostgreSQL (seen under load in
test_cancel_while_the_ticket_operation_is_submitted_keeps_reconciling[postgresql-after])."""

from __future__ import annotations

import asyncio

import pytest
from sqlalchemy import text

from ira.connectors.tickets.builtin import BuiltinTicketSystem
from ira.coordinator import operations
from ira.coordinator.facts import lock_run
from ira.coordinator.receipt import record_receipt
from ira.core.clock import FrozenClock
from ira.core.states import OperationFact
from ira.runtime.store.database import Database
from tests.coordinator.gated import GatedTickets
from tests.coordinator.harness import T0, api
from tests.coordinator.test_approvals import decide, waiting_for_approval
from tests.eventually import eventually

_WAITING_FOR_A_ROW = text("SELECT count(*) FROM pg_locks WHERE NOT granted AND locktype IN ('transactionid', 'tuple')")


async def test_a_receipt_on_its_own_locks_the_run_before_the_operation(db: Database) -> None:
    if db.dialect != "postgresql":
        pytest.skip("SQLite has one writer: no row locks to order")
    # Given an approved run whose ticket exists and whose receipt has not come back yet
    gated = GatedTickets(BuiltinTicketSystem(db, FrozenClock(T0)), hold="after")
    pump, deps, _, _, run_id, approval = await waiting_for_approval(db, tickets=gated)
    async with api(deps) as client:
        assert (await decide(client, approval.approval_id)).status_code == 200
    draining = asyncio.create_task(pump.drain())
    try:
        await asyncio.wait_for(gated.entered.wait(), timeout=10)
        async with db.reader() as conn:
            op = await operations.for_step(conn, "acme", run_id, step_id="create_ticket")
        assert op is not None and op.fact_state == OperationFact.SUBMITTED
        ticket = await gated.find_by_key("acme", op.idempotency_key)
        assert ticket is not None
        # When the receipt is recorded on its own while another transaction holds the run's row
        async with db.transaction() as holder:
            await lock_run(holder, "acme", run_id)
            recording = asyncio.create_task(record_receipt(deps, op, ticket, adopted=True, epoch=op.owner_epoch))

            async def blocked() -> bool:
                assert not recording.done(), recording
                async with db.reader() as conn:
                    return bool((await conn.execute(_WAITING_FOR_A_ROW)).scalar())

            await eventually(blocked, timeout=10, message="the receipt waits for a row lock")
            # Then it waits for the run without holding the Operation: its row can be locked now
            async with db.transaction() as other:
                await other.execute(text("SELECT operation_id FROM operations WHERE operation_id = :op "
                                         "FOR UPDATE NOWAIT"), {"op": op.operation_id})
        # and once the run is free it records the receipt
        await asyncio.wait_for(recording, timeout=10)
        async with db.reader() as conn:
            done = await operations.get_operation(conn, "acme", op.operation_id)
        assert (done.fact_state, done.external_ref) == (OperationFact.CONFIRMED_SUCCESS, ticket.key)
    finally:
        gated.release.set()
        await asyncio.wait_for(draining, timeout=20)
        await pump.close()
