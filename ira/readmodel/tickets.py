"""Tickets of the builtin ticket service, with the run and incident each was filed for."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncConnection

from ira.connectors.tickets.schema import tickets
from ira.core.model import Model
from ira.readmodel.rows import view_of

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


class TicketList(Model):
    tickets: tuple[TicketView, ...]


async def list_tickets(conn: AsyncConnection, tenant_id: str, *, limit: int = 100) -> TicketList:
    """Newest first, one tenant only."""
    rows = await conn.execute(select(tickets).where(tickets.c.tenant_id == tenant_id)
                              .order_by(tickets.c.number.desc()).limit(limit))
    return TicketList(tickets=tuple(view_of(TicketView, r, run_id=(r.labels or {}).get("run_id")) for r in rows))
