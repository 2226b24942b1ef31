"""A TicketSystem wrapper with a fault point: fault tests kill the process right after the
remote created the ticket and before the caller could store the receipt (the lost-receipt
window of DESIGN.md §1 step 8)."""

from __future__ import annotations

from ira.core.ports import TicketSystem
from ira.core.ticket import Ticket, TicketRequest
from ira.runtime.fault import FaultPoints

#: Die after the ticket system created the ticket, before its receipt reaches the store.
AFTER_CREATE = "ticket.after_create"


class FaultPointTicketSystem:
    """Delegates everything; ``create`` passes the ``ticket.after_create`` fault point."""

    def __init__(self, inner: TicketSystem, faults: FaultPoints) -> None:
        self._inner, self._faults = inner, faults
        self.name = inner.name

    async def create(self, request: TicketRequest, *, idempotency_key: str, namespace: str, epoch: int) -> Ticket:
        ticket = await self._inner.create(request, idempotency_key=idempotency_key, namespace=namespace, epoch=epoch)
        self._faults.hit(AFTER_CREATE)
        return ticket

    async def find_by_key(self, tenant_id: str, idempotency_key: str) -> Ticket | None:
        return await self._inner.find_by_key(tenant_id, idempotency_key)

    async def raise_barrier(self, tenant_id: str, namespace: str, epoch: int) -> bool:
        return await self._inner.raise_barrier(tenant_id, namespace, epoch)
