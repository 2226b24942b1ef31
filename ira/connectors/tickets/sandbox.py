"""The sandbox ticket system of staging runs (replays): builtin tickets in a namespace of their own.

A staging run is bound to ``sandbox`` tickets and the coordinator gives its flows only this
system, never the tenant's (Jira, GitHub or the builtin production tickets). Sandbox tickets are
builtin tickets stored under the tenant id ``~<tenant>`` (``~`` is not allowed in a tenant's
name, so no real tenant can see or collide with them), numbered on their own and keyed
``SBX-<n>``; ``GET /v1/tickets?environment=staging`` lists them, production's list never does.
"""

from __future__ import annotations

from ira.connectors.tickets.builtin import BuiltinTicketSystem
from ira.core.clock import Clock
from ira.core.replay import SANDBOX_TICKETS, sandbox_tenant
from ira.core.ticket import Ticket, TicketRequest
from ira.runtime.store.database import Database

__all__ = ["KEY_PREFIX", "SYSTEM", "SandboxTicketSystem", "sandbox_tenant"]

SYSTEM = SANDBOX_TICKETS
"""The system's name is the binding target a staging run holds: the dispatch check compares them."""
KEY_PREFIX = "SBX"


class SandboxTicketSystem:
    name = SYSTEM

    def __init__(self, db: Database, clock: Clock) -> None:
        self._builtin = BuiltinTicketSystem(db, clock, key_prefix=KEY_PREFIX)

    async def create(self, request: TicketRequest, *, idempotency_key: str, namespace: str, epoch: int) -> Ticket:
        sandboxed = request.model_copy(update={"tenant_id": sandbox_tenant(request.tenant_id)})
        ticket = await self._builtin.create(sandboxed, idempotency_key=idempotency_key, namespace=namespace,
                                            epoch=epoch)
        return _theirs(ticket, request.tenant_id)

    async def find_by_key(self, tenant_id: str, idempotency_key: str) -> Ticket | None:
        found = await self._builtin.find_by_key(sandbox_tenant(tenant_id), idempotency_key)
        return _theirs(found, tenant_id) if found else None

    async def raise_barrier(self, tenant_id: str, namespace: str, epoch: int) -> bool:
        return await self._builtin.raise_barrier(sandbox_tenant(tenant_id), namespace, epoch)


def _theirs(ticket: Ticket, tenant_id: str) -> Ticket:
    """The receipt as the run's tenant sees it, marked as the sandbox's."""
    return ticket.model_copy(update={"tenant_id": tenant_id, "system": SYSTEM})
