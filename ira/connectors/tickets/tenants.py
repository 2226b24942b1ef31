"""One TicketSystem per tenant, chosen by configuration (``tickets:`` / ``tenants.<t>.tickets``).

The coordinator holds a single :class:`~ira.core.ports.TicketSystem`; this router hands each
call to the tenant's own system (every call names its tenant), so a tenant's tickets can only
ever go to the project or repository configured for that tenant.
"""

from __future__ import annotations

from collections.abc import Mapping

import httpx

from ira.connectors.tickets.builtin import BuiltinTicketSystem
from ira.connectors.tickets.github import GitHubTicketSystem, github_headers
from ira.connectors.tickets.jira import JiraTicketSystem, jira_auth_headers
from ira.connectors.tickets.marked import MarkedTicketSystem, RunLink
from ira.connectors.tickets.remote import RemoteApi
from ira.core.clock import Clock
from ira.core.ports import TicketSystem
from ira.core.ticket import Ticket, TicketRequest
from ira.runtime.settings import Settings
from ira.runtime.settings.tickets import TicketsSettings
from ira.runtime.store.database import Database


class TenantTicketSystems:
    """Routes every call to its tenant's ticket system; tenants not configured use ``default``."""

    def __init__(self, systems: Mapping[str, TicketSystem], default: TicketSystem) -> None:
        self._systems, self._default = dict(systems), default
        self.name = "+".join(sorted({s.name for s in (default, *self._systems.values())}))

    def for_tenant(self, tenant_id: str) -> TicketSystem:
        return self._systems.get(tenant_id, self._default)

    def remote(self) -> dict[str, MarkedTicketSystem]:
        """The tenants whose system is outside ira (what ``ira doctor`` checks)."""
        return {t: s for t, s in self._systems.items() if isinstance(s, MarkedTicketSystem)}

    async def create(self, request: TicketRequest, *, idempotency_key: str, namespace: str, epoch: int) -> Ticket:
        return await self.for_tenant(request.tenant_id).create(
            request, idempotency_key=idempotency_key, namespace=namespace, epoch=epoch)

    async def find_by_key(self, tenant_id: str, idempotency_key: str) -> Ticket | None:
        return await self.for_tenant(tenant_id).find_by_key(tenant_id, idempotency_key)

    async def raise_barrier(self, tenant_id: str, namespace: str, epoch: int) -> bool:
        return await self.for_tenant(tenant_id).raise_barrier(tenant_id, namespace, epoch)


def build_ticket_systems(settings: Settings, db: Database, clock: Clock, *,
                         transport: httpx.AsyncBaseTransport | None = None) -> TenantTicketSystems:
    """The composition roots' one way to get tenants' ticket systems (``transport``: tests)."""
    builtin = BuiltinTicketSystem(db, clock)
    systems: dict[str, TicketSystem] = {}
    for tenant, config in settings.ticket_tenants().items():
        if config.kind != "builtin":
            systems[tenant] = remote_ticket_system(config, clock, transport=transport)
    return TenantTicketSystems(systems, builtin)


def remote_ticket_system(config: TicketsSettings, clock: Clock, *,
                         transport: httpx.AsyncBaseTransport | None = None) -> MarkedTicketSystem:
    """A Jira or GitHub system with its own HTTP client (base URL, credentials, timeout)."""
    link = _run_link(config.dashboard_url)
    if config.kind == "jira" and config.jira is not None:
        jira = config.jira
        client = httpx.AsyncClient(base_url=jira.url, headers=jira_auth_headers(jira), transport=transport,
                                   timeout=jira.timeout.total_seconds())
        return JiraTicketSystem(RemoteApi(client, "jira", jira), jira, clock, run_link=link)
    if config.kind == "github" and config.github is not None:
        github = config.github
        client = httpx.AsyncClient(base_url=github.api_url, headers=github_headers(github), transport=transport,
                                   timeout=github.timeout.total_seconds())
        return GitHubTicketSystem(RemoteApi(client, "github", github), github, clock, run_link=link)
    raise ValueError(f"not a remote ticket system: {config.kind}")


def _run_link(dashboard_url: str | None) -> RunLink | None:
    if dashboard_url is None:
        return None
    base = dashboard_url.rstrip("/")
    return lambda run_id: f"{base}/runs/{run_id}"
