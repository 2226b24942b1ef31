"""What every coordinator flow is handed: built once by ``main.py`` (or a test)."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from ira.coordinator.config import WorkflowConfig
from ira.core.clock import Clock
from ira.core.errors import ConnectorRejectedError
from ira.core.ports import TicketSystem
from ira.core.replay import STAGING
from ira.core.ticket import Ticket, TicketRequest
from ira.runtime.fault import FaultPoints
from ira.runtime.store.database import Database


@dataclass(frozen=True)
class Deps:
    db: Database
    clock: Clock
    config: WorkflowConfig
    tickets: TicketSystem
    faults: FaultPoints = field(default_factory=FaultPoints)
    """Armed only by fault tests (``IRA_FAULTS``): where this process kills itself."""
    sandbox_tickets: TicketSystem | None = None
    """Staging runs' ticket system (``SandboxTicketSystem``); None: a staging run creates no ticket."""

    def for_environment(self, environment: str) -> Deps:
        """What a run of ``environment`` may reach: a staging run's flows get the sandbox ticket
        system in place of the tenant's, so no code path of theirs holds a production one."""
        if environment != STAGING:
            return self
        return replace(self, tickets=self.sandbox_tickets or NoTicketSystem())


class NoTicketSystem:
    """Where a staging run's tickets go when no sandbox is configured: nowhere (refused)."""

    name = "none"

    async def create(self, request: TicketRequest, *, idempotency_key: str, namespace: str, epoch: int) -> Ticket:
        raise ConnectorRejectedError(self.name, "no sandbox ticket system: nothing is created for a staging run")

    async def find_by_key(self, tenant_id: str, idempotency_key: str) -> Ticket | None:
        return None

    async def raise_barrier(self, tenant_id: str, namespace: str, epoch: int) -> bool:
        return True
