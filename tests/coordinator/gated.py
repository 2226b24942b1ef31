"""A TicketSystem wrapper that holds a create at a gate: before the real create (the request
is still in flight) or after it (the ticket exists, the receipt has not come back)."""

from __future__ import annotations

import asyncio

from ira.core.ports import TicketSystem
from ira.core.ticket import Ticket, TicketRequest


class GatedTickets:
    def __init__(self, inner: TicketSystem, *, hold: str) -> None:
        assert hold in ("before", "after")
        self._inner, self._hold, self.name = inner, hold, inner.name
        self.entered, self.release = asyncio.Event(), asyncio.Event()
        self.outcomes: list[str] = []

    async def create(self, request: TicketRequest, *, idempotency_key: str, namespace: str, epoch: int) -> Ticket:
        if self._hold == "before":
            self.entered.set()
            await self.release.wait()
        try:
            ticket = await self._inner.create(request, idempotency_key=idempotency_key, namespace=namespace,
                                              epoch=epoch)
        except Exception as exc:
            self.outcomes.append(type(exc).__name__)
            raise
        self.outcomes.append(ticket.key)
        if self._hold == "after":
            self.entered.set()
            await self.release.wait()
        return ticket

    async def find_by_key(self, tenant_id: str, idempotency_key: str) -> Ticket | None:
        return await self._inner.find_by_key(tenant_id, idempotency_key)

    async def raise_barrier(self, tenant_id: str, namespace: str, epoch: int) -> bool:
        return await self._inner.raise_barrier(tenant_id, namespace, epoch)
