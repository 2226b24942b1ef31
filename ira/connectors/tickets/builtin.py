"""The builtin ticket service: SQL-backed tickets ``INC-1``, ``INC-2``, ... per tenant.

It is the default :class:`~ira.core.ports.TicketSystem` and the reference for what a ticket
connector must guarantee (``tests/contracts/test_ticket_system.py``):

* create is atomic and idempotent: one transaction checks the writer's epoch against the
  namespace's barrier, looks the key up, numbers and inserts the ticket; the same key with
  the same payload returns the same ticket, with another payload it is refused;
* a per-namespace epoch barrier: every create or ``raise_barrier`` moves the barrier up to
  its epoch and anything below it is refused, so once a new owner raised it, an old
  owner's in-flight create can no longer land and "not found" becomes a definitive answer.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import bindparam, insert, select, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncConnection

from ira.connectors.tickets.schema import ticket_barriers, ticket_counters, tickets
from ira.core.clock import Clock
from ira.core.errors import ConnectorRejectedError, ConnectorUnavailableError, StaleEpochError
from ira.core.ticket import Ticket, TicketRequest
from ira.runtime.store.database import Database

SYSTEM = "builtin"
_RETRIES = 5


class StoredTicket(Ticket):
    """A builtin ticket with its content (what ``GET /v1/tickets`` lists)."""

    severity: str
    service: str | None = None
    incident_id: str
    body: str


class BuiltinTicketSystem:
    """Tickets in ira's own database; keys ``<prefix>-<n>`` numbered per tenant."""

    name = SYSTEM

    def __init__(self, db: Database, clock: Clock, *, key_prefix: str = "INC") -> None:
        self._db, self._clock, self._prefix = db, clock, key_prefix

    async def create(
        self, request: TicketRequest, *, idempotency_key: str, namespace: str, epoch: int
    ) -> Ticket:
        """One transaction; a concurrent first write of the same key or counter is retried."""
        for _ in range(_RETRIES):
            try:
                async with self._db.transaction() as conn:
                    return await self._create(conn, request, idempotency_key, namespace=namespace, epoch=epoch)
            except IntegrityError:
                continue  # another writer inserted the key or the counter first: look again
        raise ConnectorUnavailableError(SYSTEM, f"create of {idempotency_key} kept colliding")

    async def _create(
        self, conn: AsyncConnection, request: TicketRequest, key: str, *, namespace: str, epoch: int
    ) -> Ticket:
        await _advance_barrier(conn, request.tenant_id, namespace, epoch=epoch)
        payload_hash = request.payload_hash()
        existing = await _by_key(conn, request.tenant_id, key)
        if existing is not None:
            if existing.payload_hash != payload_hash:
                raise ConnectorRejectedError(SYSTEM, f"idempotency key {key} was used for another payload")
            return existing
        number = await _next_number(conn, request.tenant_id)
        row = {
            "tenant_id": request.tenant_id, "key": f"{self._prefix}-{number}", "number": number,
            "idempotency_key": key, "payload_hash": payload_hash, "title": request.title, "body": request.body,
            "severity": request.severity, "service": request.service, "incident_id": request.incident_id,
            "labels": request.labels, "namespace": namespace, "epoch": epoch, "created_at": self._clock.now(),
        }
        await conn.execute(_INSERT_TICKET, row)
        return _ticket(row)

    async def find_by_key(self, tenant_id: str, idempotency_key: str) -> Ticket | None:
        async with self._db.reader() as conn:
            return await _by_key(conn, tenant_id, idempotency_key)

    async def raise_barrier(self, tenant_id: str, namespace: str, epoch: int) -> bool:
        async with self._db.transaction() as conn:
            await _advance_barrier(conn, tenant_id, namespace, epoch=epoch)
        return True

    async def list_tickets(self, tenant_id: str, *, limit: int = 100) -> list[StoredTicket]:
        """Newest first, one tenant only."""
        async with self._db.reader() as conn:
            rows = await conn.execute(select(tickets).where(tickets.c.tenant_id == tenant_id)
                                      .order_by(tickets.c.number.desc()).limit(limit))
            return [_stored(r._mapping) for r in rows]


async def _advance_barrier(conn: AsyncConnection, tenant_id: str, namespace: str, *, epoch: int) -> None:
    """Move the barrier up to ``epoch``; StaleEpochError if it already stands higher.

    The conditional upsert is the atomic check-and-set: under PostgreSQL it takes the row
    lock, so a create and a barrier raise on one namespace are serialized.
    """
    moved = await conn.execute(_ADVANCE_BARRIER[conn.dialect.name == "postgresql"],
                               {"tenant_id": tenant_id, "namespace": namespace, "epoch": epoch})
    if moved.first() is None:
        raise StaleEpochError(f"{SYSTEM} tickets: namespace {namespace} is fenced above epoch {epoch}")


def _advance_statement(dialect: Any) -> Any:
    """One upsert: a new namespace's barrier is inserted at ``epoch``; an existing one moves up to
    it only from at or below it (the update's WHERE); RETURNING says whether a row stands at it."""
    statement = dialect.insert(ticket_barriers)
    return statement.on_conflict_do_update(
        index_elements=[ticket_barriers.c.tenant_id, ticket_barriers.c.namespace],
        set_={"epoch": statement.excluded.epoch}, where=ticket_barriers.c.epoch <= statement.excluded.epoch,
    ).returning(ticket_barriers.c.epoch)


_ADVANCE_BARRIER = {postgres: _advance_statement(postgresql if postgres else sqlite) for postgres in (False, True)}
"""Built once per dialect (False: SQLite)."""


async def _next_number(conn: AsyncConnection, tenant_id: str) -> int:
    number = (await conn.execute(_NEXT_NUMBER, {"k_tenant": tenant_id})).scalar()
    if number is not None:
        return int(number)
    await conn.execute(insert(ticket_counters).values(tenant_id=tenant_id, last_number=1))
    return 1


async def _by_key(conn: AsyncConnection, tenant_id: str, key: str) -> Ticket | None:
    row = (await conn.execute(_BY_KEY, {"k_tenant": tenant_id, "k_key": key})).first()
    return _ticket(row._mapping) if row else None


# A create's statements, built once with bound parameters (see ira/runtime/store/steps.py on why).
_BY_KEY = select(tickets).where(tickets.c.tenant_id == bindparam("k_tenant"),
                                tickets.c.idempotency_key == bindparam("k_key"))
_NEXT_NUMBER = update(ticket_counters).where(ticket_counters.c.tenant_id == bindparam("k_tenant")) \
    .values(last_number=ticket_counters.c.last_number + 1).returning(ticket_counters.c.last_number)
_INSERT_TICKET = insert(tickets)


def _ticket(m: Any) -> Ticket:
    return Ticket(tenant_id=m["tenant_id"], key=m["key"], idempotency_key=m["idempotency_key"],
                  payload_hash=m["payload_hash"], title=m["title"], system=SYSTEM, created_at=m["created_at"])


def _stored(m: Any) -> StoredTicket:
    return StoredTicket(**_ticket(m).model_dump(), severity=m["severity"], service=m["service"],
                        incident_id=m["incident_id"], body=m["body"])
