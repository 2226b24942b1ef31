"""Exactly-once filing into a system that has no idempotency keys and no write barrier.

Jira and GitHub accept any number of identical creates, so ira brings the idempotency itself:
every issue carries its key (``mark.py``), and a create first looks the key up. The same key
with the same payload returns the issue already filed; with another payload it is a conflict
(ConnectorRejectedError), never a second issue. Creates of one key inside this process are
serialized, so two concurrent calls cannot both miss the lookup.

What these systems cannot do is fence an older writer: ``raise_barrier`` answers False. The
coordinator relies on that answer (``coordinator/ticket.py``, ``coordinator/reconcile.py``): an
Operation in doubt (SUBMITTED, its answer lost) is only ever *looked up*, never sent again.
Found: adopted. Not found: it may still be in flight or not yet searchable, so "not found" is
never taken as "not created": the Operation goes UNKNOWN and reconciliation looks again
(a "look again" timer, then the operation deadline); found by then it is adopted, otherwise a
person gets a manual-repair WorkItem with the key to search for. Either way, one issue at most.

The same rule holds inside a create: when the answer to the POST is lost (transport error,
timeout) or is a 5xx, the connector looks the key up once; found -> that issue, else
ConnectorUnavailableError and the coordinator's path above. Only a 429 is sent again, because
a rate-limited request was not applied.
"""

from __future__ import annotations

import asyncio
from abc import ABC, abstractmethod
from collections import defaultdict
from collections.abc import Callable

from ira.connectors.tickets.mark import IssueMark
from ira.core.clock import Clock
from ira.core.errors import ConnectorRejectedError, ConnectorUnavailableError
from ira.core.ticket import Ticket, TicketRequest

RunLink = Callable[[str], str | None]
"""run_id -> the run's page on the dashboard (None: no link in the issue)."""


class MarkedTicketSystem(ABC):
    """The TicketSystem part Jira and GitHub share; subclasses find and file marked issues."""

    name: str

    def __init__(self, clock: Clock) -> None:
        self._clock = clock
        self._locks: defaultdict[tuple[str, str], asyncio.Lock] = defaultdict(asyncio.Lock)

    @abstractmethod
    async def find_by_key(self, tenant_id: str, idempotency_key: str) -> Ticket | None:
        """Search the key's label, then confirm by the mark (tenant and full key)."""

    @abstractmethod
    async def _file(self, request: TicketRequest, mark: IssueMark) -> Ticket:
        """One create request carrying ``mark``; raises on anything but success."""

    @abstractmethod
    async def check(self) -> None:
        """Raise with a one-line reason when the credentials or the project/repo do not work."""

    async def create(
        self, request: TicketRequest, *, idempotency_key: str, namespace: str, epoch: int
    ) -> Ticket:
        """Look up, then file once; ``namespace``/``epoch`` cannot be enforced here (see above)."""
        async with self._locks[(request.tenant_id, idempotency_key)]:
            existing = await self.find_by_key(request.tenant_id, idempotency_key)
            if existing is not None:
                return self._same_payload(existing, request)
            mark = IssueMark(tenant_id=request.tenant_id, idempotency_key=idempotency_key,
                             payload_hash=request.payload_hash(), filed_at=self._clock.now())
            try:
                return await self._file(request, mark)
            except ConnectorUnavailableError:
                found = await self.find_by_key(request.tenant_id, idempotency_key)
                if found is None:
                    raise  # in doubt: the coordinator parks it and looks again, never re-sends
                return found

    async def raise_barrier(self, tenant_id: str, namespace: str, epoch: int) -> bool:
        """Always False: neither Jira nor GitHub can refuse an older writer's create."""
        return False

    def _same_payload(self, existing: Ticket, request: TicketRequest) -> Ticket:
        if existing.payload_hash != request.payload_hash():
            raise ConnectorRejectedError(self.name, f"idempotency key {existing.idempotency_key} was used for "
                                                    f"another payload ({existing.key})")
        return existing
