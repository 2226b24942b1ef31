"""Tickets of the tenant's ticket system, with the run and incident each was filed for.

The builtin service's come from its own table. Jira and GitHub tickets are not copied into
ira: what ira knows of them is the confirmed create Operation (key, system, URL) and the draft
it sent (title, body, severity), so that is what they are read from.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncConnection

from ira.connectors.tickets.schema import tickets
from ira.core.model import Model
from ira.core.replay import SANDBOX_TICKETS, STAGING, sandbox_tenant
from ira.core.report import TicketDraft
from ira.core.states import OperationFact
from ira.readmodel.rows import view_of
from ira.runtime.store import artifacts
from ira.runtime.store.schema import operations

SYSTEM = "builtin"


class TicketView(Model):
    tenant_id: str
    key: str
    """``INC-12``."""
    idempotency_key: str
    payload_hash: str
    title: str
    body: str
    severity: str
    service: str | None
    incident_id: str
    run_id: str | None
    """The run that filed it (from the ticket's ``run_id`` label)."""
    labels: dict[str, str]
    system: str = SYSTEM
    url: str | None = None
    created_at: datetime
    environment: str | None = None
    """``staging`` for a sandbox ticket (a replay's), never listed with production's."""


class TicketList(Model):
    tickets: tuple[TicketView, ...]


async def list_tickets(conn: AsyncConnection, tenant_id: str, *, limit: int = 100,
                       system: str = SYSTEM, environment: str | None = None) -> TicketList:
    """Newest first, one tenant only, of ``system`` (the tenant's configured ticket system), or with
    ``environment=staging`` the tenant's sandbox tickets (replays') only."""
    if environment == STAGING:
        sandboxed = await list_tickets(conn, sandbox_tenant(tenant_id), limit=limit)
        return TicketList(tickets=tuple(t.model_copy(update={"tenant_id": tenant_id, "system": SANDBOX_TICKETS,
                                                             "environment": STAGING}) for t in sandboxed.tickets))
    if system != SYSTEM:
        return await _filed_in(conn, tenant_id, system, limit=limit)
    rows = await conn.execute(select(tickets).where(tickets.c.tenant_id == tenant_id)
                              .order_by(tickets.c.number.desc()).limit(limit))
    return TicketList(tickets=tuple(view_of(TicketView, r, run_id=(r.labels or {}).get("run_id")) for r in rows))


async def _filed_in(conn: AsyncConnection, tenant_id: str, system: str, *, limit: int) -> TicketList:
    """Confirmed create Operations in ``system``, each with the draft it filed."""
    o = operations.c
    rows = await conn.execute(select(operations).where(
        o.tenant_id == tenant_id, o.external_system == system, o.external_ref.is_not(None),
        o.fact_state == OperationFact.CONFIRMED_SUCCESS).order_by(o.updated_at.desc()).limit(limit))
    found = []
    for row in rows:
        request = TicketDraft.model_validate_json((await artifacts.get_artifact(conn, tenant_id, row.payload_hash))[1]
                                                  ).request
        found.append(TicketView(
            tenant_id=tenant_id, key=row.external_ref, idempotency_key=row.idempotency_key,
            payload_hash=request.payload_hash(), title=request.title, body=request.body, severity=request.severity,
            service=request.service, incident_id=request.incident_id, run_id=row.run_id, labels=request.labels,
            system=system, url=row.external_url, created_at=row.updated_at))
    return TicketList(tickets=tuple(found))
