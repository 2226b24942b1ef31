"""Tables of the builtin ticket service (migration ``0002_coordinator``).

They live in ira's database but belong to the ticket service, not to the runs: the
coordinator reaches them only through the :class:`~ira.core.ports.TicketSystem` port, as it
would reach Jira.
"""

from __future__ import annotations

from sqlalchemy import JSON, Column, Integer, PrimaryKeyConstraint, String, Table, Text, UniqueConstraint

from ira.runtime.store.schema import UtcDateTime, metadata

tickets = Table(
    "tickets", metadata,
    Column("tenant_id", String(64), nullable=False),
    Column("key", String(32), nullable=False),
    Column("number", Integer, nullable=False),
    Column("idempotency_key", String(200), nullable=False),
    Column("payload_hash", String(100), nullable=False),
    Column("title", String(300), nullable=False),
    Column("body", Text, nullable=False),
    Column("severity", String(16), nullable=False),
    Column("service", String(200)),
    Column("incident_id", String(64), nullable=False),
    Column("labels", JSON, nullable=False),
    Column("namespace", String(200), nullable=False),
    Column("epoch", Integer, nullable=False),
    Column("created_at", UtcDateTime(), nullable=False),
    PrimaryKeyConstraint("tenant_id", "key"),
    UniqueConstraint("tenant_id", "idempotency_key"),
    UniqueConstraint("tenant_id", "number"),
)

ticket_counters = Table(
    "ticket_counters", metadata,
    Column("tenant_id", String(64), nullable=False),
    Column("last_number", Integer, nullable=False),
    PrimaryKeyConstraint("tenant_id"),
)

ticket_barriers = Table(
    "ticket_barriers", metadata,
    Column("tenant_id", String(64), nullable=False),
    Column("namespace", String(200), nullable=False),
    Column("epoch", Integer, nullable=False),
    PrimaryKeyConstraint("tenant_id", "namespace"),
)
