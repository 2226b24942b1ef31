"""Operations in doubt that nobody can settle automatically go to a person, with the facts."""

from __future__ import annotations

from datetime import timedelta

import pytest

from ira.connectors.tickets.builtin import BuiltinTicketSystem
from ira.coordinator import operations, records
from ira.coordinator.reconcile import MANUAL_REPAIR, close_manual_repair
from ira.core.clock import FrozenClock
from ira.core.errors import ConnectorUnavailableError, DomainError
from ira.core.ports import TicketSystem
from ira.core.states import OperationFact, OperationHandling, RunState, WaitKind
from ira.core.ticket import Ticket, TicketRequest
from ira.runtime.scanner import Scanner
from ira.runtime.store import runs
from ira.runtime.store.database import Database
from ira.runtime.wakeup import step_wakeup
from tests.coordinator.harness import T0, api, auth
from tests.coordinator.test_approvals import decide, waiting_for_approval


class OpaqueTickets:
    """A ticket system that times out on create and can neither be fenced nor queried yet."""

    def __init__(self, inner: TicketSystem) -> None:
        self.name, self._inner = "opaque", inner

    async def create(self, request: TicketRequest, *, idempotency_key: str, namespace: str, epoch: int) -> Ticket:
        raise ConnectorUnavailableError("opaque", "read timeout after the request was sent")

    async def find_by_key(self, tenant_id: str, idempotency_key: str) -> Ticket | None:
        return None

    async def raise_barrier(self, tenant_id: str, namespace: str, epoch: int) -> bool:
        return False


async def test_unknown_past_its_deadline_becomes_manual_repair_that_needs_evidence(db: Database) -> None:
    # Given an approved ticket whose create timed out and cannot be verified
    clock = FrozenClock(T0)
    opaque = OpaqueTickets(BuiltinTicketSystem(db, clock))
    pump, deps, clock, _, run_id, approval = await waiting_for_approval(db, tickets=opaque)
    async with api(deps) as client:
        assert (await decide(client, approval.approval_id)).status_code == 200
    await pump.drain()
    # When the next owner finds nothing it can trust, and the deadline passes
    wake = step_wakeup("acme", run_id, "create_ticket", kind="create_ticket", environment="prod", at=T0).envelope
    await pump.dispatchers[0].handle_wakeup(wake)
    async with db.reader() as conn:
        parked = await runs.get_run(conn, "acme", run_id)
    assert (parked.state, parked.wait_kind) == (RunState.WAITING, WaitKind.EXTERNAL)
    clock.advance(deps.config.operation_deadline + timedelta(seconds=1))
    await Scanner(db=db, clock=clock, environment="prod").scan_once()
    await pump.drain()
    # Then a person gets a manual repair item with what is known and what to query
    async with db.reader() as conn:
        op = await operations.for_step(conn, "acme", run_id, step_id="create_ticket")
        run = await runs.get_run(conn, "acme", run_id)
        [item] = [i for i in await records.list_work_items(conn, "acme", run_id) if i.kind == MANUAL_REPAIR]
    assert (op.fact_state, op.handling_state) == (OperationFact.UNKNOWN, OperationHandling.MANUAL_REPAIR)
    assert (run.state, run.wait_kind) == (RunState.WAITING, WaitKind.HUMAN_REVIEW)
    assert item.facts["idempotency_key"] == op.idempotency_key and "suggested_query" in item.facts
    assert item.facts["evidence"]["run"] == f"/v1/runs/{run_id}"
    # And closing it takes evidence
    with pytest.raises(DomainError):
        await close_manual_repair(deps, "acme", item.work_item_id, evidence_ref="sha256:nothing",
                                  external_ref="INC-77", principal="lead")
    # (over HTTP: a viewer may not; an approver closes it with a note, kept as the evidence)
    async with api(deps) as client:
        path = f"/v1/work-items/{item.work_item_id}/close"
        viewer = await client.post(path, headers=auth("viewer"), json={"note": "exists", "external_ref": "INC-77"})
        closing = await client.post(path, headers=auth("lead"), json={
            "note": "INC-77 exists in the tracker, created 10:41", "external_ref": "INC-77"})
        note = await client.get(f"/v1/artifacts/{closing.json()['evidence_ref']}", headers=auth("viewer"))
    await pump.drain()
    await pump.close()
    assert viewer.status_code == 403 and closing.status_code == 200, closing.text
    assert closing.json()["fact_state"] == "confirmed_success"
    assert (note.json()["note"], note.json()["by"]) == ("INC-77 exists in the tracker, created 10:41", "lead")
    async with db.reader() as conn:
        closed = await operations.get_operation(conn, "acme", op.operation_id)
    assert (closed.fact_state, closed.external_ref, closed.handling_state) == (
        OperationFact.CONFIRMED_SUCCESS, "INC-77", OperationHandling.NONE)
    async with db.reader() as conn:
        run = await runs.get_run(conn, "acme", run_id)
        log = [e.type for e in await runs.list_events(conn, "acme", run_id)]
    assert (run.state, run.outcome) == (RunState.COMPLETED, "ticket_created")  # resumed from the person's fact
    assert log.index("MANUAL_REPAIR_CLOSED") < log.index("RUN_COMPLETED")
