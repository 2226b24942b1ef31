"""C5 facts of the ticket Operation: its identity at the ticket system, and its receipt."""

from __future__ import annotations

import hashlib

from ira.coordinator import operations
from ira.coordinator.deps import Deps
from ira.coordinator.facts import store_json
from ira.coordinator.notify import announce
from ira.coordinator.report import canonical_json
from ira.coordinator.workflow import CREATE_TICKET, CREATE_TICKET_ACTION
from ira.core.commit import EventDraft
from ira.core.delivery import NotificationKind
from ira.core.errors import DomainError
from ira.core.events import RunEventType
from ira.core.operation import Operation
from ira.core.states import TERMINAL_RUN_STATES, OperationFact, OperationHandling
from ira.core.ticket import Ticket
from ira.runtime.store import runs


def namespace(run_id: str) -> str:
    """The fencing namespace at the ticket system: this run's create_ticket step."""
    return f"{run_id}/{CREATE_TICKET}"


def idempotency_key(tenant_id: str, incident_id: str, draft_ref: str) -> str:
    """Stable across retries, owners and restarts; a new draft is a new intent."""
    basis = "\n".join((tenant_id, incident_id, CREATE_TICKET_ACTION, draft_ref))
    return "sha256:" + hashlib.sha256(basis.encode()).hexdigest()


async def record_receipt(deps: Deps, op: Operation, ticket: Ticket, *, adopted: bool, epoch: int) -> str:
    """C5: store the receipt and confirm the fact, whoever observed it and whatever the run's
    state (a ticket that appeared after a cancel is still recorded). Returns the receipt ref."""
    now = deps.clock.now()
    async with deps.db.transaction() as conn:
        receipt = await store_json(conn, op.tenant_id, canonical_json(ticket), config=deps.config, at=now)
        current = await operations.get_operation(conn, op.tenant_id, op.operation_id)
        if current.fact_state == OperationFact.CONFIRMED_SUCCESS:
            if current.external_ref != ticket.key:
                raise DomainError(f"operation {op.operation_id} confirmed {current.external_ref}, now {ticket.key}")
            return receipt.ref
        await operations.move(conn, current, to=OperationFact.CONFIRMED_SUCCESS, receipt=ticket,
                              handling=OperationHandling.NONE, at=now, from_facts=operations.IN_DOUBT)
        run = await runs.get_run(conn, op.tenant_id, op.run_id)
        await runs.append_events(conn, op.tenant_id, op.run_id, [EventDraft(type=RunEventType.OPERATION_CONFIRMED,
            data={
            "operation_id": op.operation_id, "external_ref": ticket.key, "system": ticket.system,
            "external_url": ticket.url, "receipt_ref": receipt.ref,
            "adopted": adopted, "owner_epoch": epoch, "late": run.state in TERMINAL_RUN_STATES})], at=now)
        # people hear of the ticket when it exists (late: found after the run ended, by reconciliation)
        await announce(conn, run, kind=NotificationKind.TICKET_CREATED, config=deps.config, at=now,
                       data={"ticket_key": ticket.key, "title": ticket.title, "url": ticket.url,
                             "late": run.state in TERMINAL_RUN_STATES})
        return receipt.ref
