"""Tables. Every row carries ``tenant_id`` and every key and unique constraint includes it.

Changing a table means a new Alembic revision under ``ira/infra/migrations``; the tests
build their databases through the migrations, so a model that drifts from them fails there.
"""

from __future__ import annotations

from datetime import UTC, datetime
from enum import StrEnum

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    Column,
    DateTime,
    ForeignKeyConstraint,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    PrimaryKeyConstraint,
    String,
    Table,
    Text,
    TypeDecorator,
    UniqueConstraint,
    literal_column,
)
from sqlalchemy.engine import Dialect
from sqlalchemy.sql.elements import ColumnElement

from ira.core.states import ApprovalState, DeliveryState, OperationFact

metadata = MetaData(
    naming_convention={
        "ix": "ix_%(table_name)s_%(column_0_N_name)s",
        "uq": "uq_%(table_name)s_%(column_0_N_name)s",
        "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
        "pk": "pk_%(table_name)s",
    }
)


class UtcDateTime(TypeDecorator[datetime]):
    """Timezone-aware UTC datetimes on every backend (SQLite would hand back naive ones)."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError("naive datetime given to the store; use an aware UTC datetime")
        return value.astimezone(UTC)

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def _tz() -> UtcDateTime:
    return UtcDateTime()


def _literal(state: StrEnum) -> ColumnElement[str]:
    """A state spelled inline in SQL (partial indexes and the queries that must match them)."""
    return literal_column(f"'{state.value}'")


def _tenant() -> Column[str]:
    return Column("tenant_id", String(64), nullable=False)


tasks = Table(
    "tasks", metadata,
    _tenant(),
    Column("task_id", String(64), nullable=False),
    Column("kind", String(64), nullable=False),
    Column("subject_ref", String(200), nullable=False),
    Column("created_at", _tz(), nullable=False),
    PrimaryKeyConstraint("tenant_id", "task_id"),
)

runs = Table(
    "runs", metadata,
    _tenant(),
    Column("run_id", String(64), nullable=False),
    Column("task_id", String(64), nullable=False),
    Column("workflow", String(100), nullable=False),
    Column("environment", String(32), nullable=False),
    Column("state", String(16), nullable=False),
    Column("wait_kind", String(16)),
    Column("state_version", Integer, nullable=False),
    Column("last_seq", Integer, nullable=False),
    Column("incident_id", String(64)),
    Column("contract", JSON, nullable=False),
    Column("bindings", JSON, nullable=False),
    Column("outcome", String(64)),
    Column("idempotency_key", String(200)),
    Column("created_at", _tz(), nullable=False),
    Column("updated_at", _tz(), nullable=False),
    Column("traceparent", String(64)),
    PrimaryKeyConstraint("tenant_id", "run_id"),
    UniqueConstraint("tenant_id", "idempotency_key"),
    ForeignKeyConstraint(["tenant_id", "task_id"], ["tasks.tenant_id", "tasks.task_id"]),
    Index(None, "tenant_id", "state"),
    Index(None, "tenant_id", "incident_id"),
)

steps = Table(
    "steps", metadata,
    _tenant(),
    Column("run_id", String(64), nullable=False),
    Column("step_id", String(64), nullable=False),
    Column("kind", String(64), nullable=False),
    Column("state", String(16), nullable=False),
    Column("depends_on", JSON, nullable=False),
    Column("required", Boolean, nullable=False),
    Column("owner", String(128)),
    Column("owner_epoch", Integer, nullable=False),
    Column("lease_until", _tz()),
    Column("binding", JSON, nullable=False),
    Column("result_ref", String(100)),
    Column("woken_at", _tz()),
    Column("updated_at", _tz(), nullable=False),
    PrimaryKeyConstraint("tenant_id", "run_id", "step_id"),
    ForeignKeyConstraint(["tenant_id", "run_id"], ["runs.tenant_id", "runs.run_id"]),
    Index(None, "state", "lease_until"),
)

attempts = Table(
    "attempts", metadata,
    _tenant(),
    Column("attempt_id", String(64), nullable=False),
    Column("run_id", String(64), nullable=False),
    Column("step_id", String(64), nullable=False),
    Column("owner", String(128), nullable=False),
    Column("owner_epoch", Integer, nullable=False),
    Column("started_at", _tz(), nullable=False),
    Column("ended_at", _tz()),
    Column("outcome", String(32)),
    Column("error", Text),
    Column("usage", JSON, nullable=False),
    PrimaryKeyConstraint("tenant_id", "attempt_id"),
    Index(None, "tenant_id", "run_id", "step_id"),
)

events = Table(
    "events", metadata,
    _tenant(),
    Column("run_id", String(64), nullable=False),
    Column("run_seq", Integer, nullable=False),
    Column("event_id", String(64), nullable=False),
    Column("type", String(64), nullable=False),
    Column("at", _tz(), nullable=False),
    Column("data", JSON, nullable=False),
    PrimaryKeyConstraint("tenant_id", "run_id", "run_seq"),
    UniqueConstraint("tenant_id", "event_id"),
)

decisions = Table(
    "decisions", metadata,
    _tenant(),
    Column("evaluation_id", String(64), nullable=False),
    Column("event_id", String(64), nullable=False),
    Column("incident_id", String(64)),
    Column("decision", String(16), nullable=False),
    Column("reason", String(64), nullable=False),
    Column("basis", JSON, nullable=False),
    Column("at", _tz(), nullable=False),
    PrimaryKeyConstraint("tenant_id", "evaluation_id"),
    Index(None, "tenant_id", "incident_id"),
)

operations = Table(
    "operations", metadata,
    _tenant(),
    Column("operation_id", String(64), nullable=False),
    Column("run_id", String(64), nullable=False),
    Column("step_id", String(64), nullable=False),
    Column("kind", String(64), nullable=False),
    Column("idempotency_key", String(200), nullable=False),
    Column("payload_hash", String(100), nullable=False),
    Column("approval_id", String(64)),
    Column("fact_state", String(24), nullable=False),
    Column("handling_state", String(24), nullable=False),
    Column("external_ref", String(200)),
    Column("external_system", String(32)),
    Column("external_url", String(1000)),
    Column("error", String(1000)),
    Column("owner_epoch", Integer, nullable=False),
    Column("deadline_at", _tz()),
    Column("created_at", _tz(), nullable=False),
    Column("updated_at", _tz(), nullable=False),
    PrimaryKeyConstraint("tenant_id", "operation_id"),
    UniqueConstraint("tenant_id", "idempotency_key"),
    Index(None, "tenant_id", "run_id"),
)
OPERATION_UNKNOWN = operations.c.fact_state == _literal(OperationFact.UNKNOWN)
"""Operations nobody knows the outcome of: few, and read by the scanner every round."""
Index("ix_operations_unknown", operations.c.updated_at,
      sqlite_where=OPERATION_UNKNOWN, postgresql_where=OPERATION_UNKNOWN)

approvals = Table(
    "approvals", metadata,
    _tenant(),
    Column("approval_id", String(64), nullable=False),
    Column("run_id", String(64), nullable=False),
    Column("step_id", String(64), nullable=False),
    Column("action", String(64), nullable=False),
    Column("payload_hash", String(100), nullable=False),
    Column("resource_version", Integer, nullable=False),
    Column("required_role", String(64), nullable=False),
    Column("state", String(16), nullable=False),
    Column("expires_at", _tz(), nullable=False),
    Column("decided_by", String(128)),
    Column("decided_at", _tz()),
    Column("reason", Text),
    Column("created_at", _tz(), nullable=False),
    PrimaryKeyConstraint("tenant_id", "approval_id"),
    Index(None, "tenant_id", "run_id"),
)
APPROVAL_PENDING = approvals.c.state == _literal(ApprovalState.PENDING)
"""Approvals waiting for a person. A literal, not a bound parameter: PostgreSQL uses a partial
index only when it can prove the query's predicate implies the index's, which a generic plan of
``state = $1`` never does."""
Index("ix_approvals_pending", approvals.c.created_at,
      sqlite_where=APPROVAL_PENDING, postgresql_where=APPROVAL_PENDING)

outbox = Table(
    "outbox", metadata,
    Column("id", BigInteger().with_variant(Integer, "sqlite"), primary_key=True, autoincrement=True),
    _tenant(),
    Column("message_id", String(64), nullable=False),
    Column("topic", String(200), nullable=False),
    Column("key", String(300), nullable=False),
    Column("value", LargeBinary, nullable=False),
    Column("headers", JSON, nullable=False),
    Column("created_at", _tz(), nullable=False),
    Column("claimed_by", String(128)),
    Column("claimed_until", _tz()),
    Column("sent_at", _tz()),
    Column("awaits", String(100)),
    Column("check_at", _tz()),
    Column("resends", Integer, nullable=False, server_default="0"),
    UniqueConstraint("tenant_id", "message_id"),
    Index("ix_outbox_unsent", "sent_at", "id"),
    Index("ix_outbox_awaiting", "awaits", "sent_at"),
)
Index("ix_outbox_unsent_topic", outbox.c.topic, outbox.c.id,
      sqlite_where=outbox.c.sent_at.is_(None), postgresql_where=outbox.c.sent_at.is_(None))
"""The relay's lanes claim one topic's oldest unsent rows at a time: without it, a lane whose
topics have no unsent row walked every unsent row of the others (``ix_outbox_unsent``) per pass."""
"""``awaits``: the consumer whose inbox must come to hold the message; the scanner re-sends a
sent row until it does (then clears it). ``check_at``: not before this time again (backoff).
An urgent message (taken first by its consumer) carries the ``urgent`` header in ``headers``."""

inbox = Table(
    "inbox", metadata,
    _tenant(),
    Column("consumer", String(100), nullable=False),
    Column("message_id", String(200), nullable=False),
    Column("received_at", _tz(), nullable=False),
    PrimaryKeyConstraint("tenant_id", "consumer", "message_id"),
)

budget_accounts = Table(
    "budget_accounts", metadata,
    _tenant(),
    Column("run_id", String(64), nullable=False),
    Column("scope", String(64), nullable=False),
    Column("dimension", String(16), nullable=False),
    Column("limit_amount", BigInteger, nullable=False),
    Column("reserved", BigInteger, nullable=False),
    Column("settled", BigInteger, nullable=False),
    Column("parent_reservation_id", String(100)),
    PrimaryKeyConstraint("tenant_id", "run_id", "scope", "dimension"),
)

budget_reservations = Table(
    "budget_reservations", metadata,
    _tenant(),
    Column("reservation_id", String(100), nullable=False),
    Column("run_id", String(64), nullable=False),
    Column("scope", String(64), nullable=False),
    Column("dimension", String(16), nullable=False),
    Column("amount", BigInteger, nullable=False),
    Column("state", String(16), nullable=False),
    Column("used", BigInteger),
    Column("created_at", _tz(), nullable=False),
    Column("closed_at", _tz()),
    PrimaryKeyConstraint("tenant_id", "reservation_id"),
)

artifacts = Table(
    "artifacts", metadata,
    _tenant(),
    Column("ref", String(80), nullable=False),
    Column("media_type", String(100), nullable=False),
    Column("size", Integer, nullable=False),
    Column("body", LargeBinary, nullable=False),
    Column("created_at", _tz(), nullable=False),
    PrimaryKeyConstraint("tenant_id", "ref"),
)

deliveries = Table(
    "deliveries", metadata,
    _tenant(),
    Column("notification_id", String(64), nullable=False),
    Column("run_id", String(64)),
    Column("channel", String(64), nullable=False),
    Column("state", String(16), nullable=False),
    Column("attempts", Integer, nullable=False),
    Column("payload_ref", String(80)),
    Column("receipts", JSON, nullable=False),
    Column("created_at", _tz(), nullable=False),
    Column("updated_at", _tz(), nullable=False),
    PrimaryKeyConstraint("tenant_id", "notification_id"),
    Index(None, "tenant_id", "run_id"),
)
DELIVERY_PENDING = deliveries.c.state == _literal(DeliveryState.PENDING)
"""Deliveries not answered yet (the scanner's backlog read and its re-drive)."""
Index("ix_deliveries_pending", deliveries.c.created_at,
      sqlite_where=DELIVERY_PENDING, postgresql_where=DELIVERY_PENDING)

work_items = Table(
    "work_items", metadata,
    _tenant(),
    Column("work_item_id", String(64), nullable=False),
    Column("kind", String(32), nullable=False),
    Column("run_id", String(64)),
    Column("state", String(16), nullable=False),
    Column("summary", Text, nullable=False),
    Column("facts", JSON, nullable=False),
    Column("created_at", _tz(), nullable=False),
    Column("closed_at", _tz()),
    PrimaryKeyConstraint("tenant_id", "work_item_id"),
    Index(None, "tenant_id", "state"),
)

timers = Table(
    "timers", metadata,
    _tenant(),
    Column("timer_id", String(64), nullable=False),
    Column("run_id", String(64)),
    Column("step_id", String(64)),
    Column("kind", String(32), nullable=False),
    Column("due_at", _tz(), nullable=False),
    Column("fired_at", _tz()),
    Column("payload", JSON, nullable=False),
    PrimaryKeyConstraint("tenant_id", "timer_id"),
    Index("ix_timers_due", "fired_at", "due_at"),
)

sessions = Table(
    "sessions", metadata,
    _tenant(),
    Column("session_hash", String(64), nullable=False),
    Column("principal", String(200), nullable=False),
    Column("token_digest", String(64), nullable=False),
    Column("created_at", _tz(), nullable=False),
    Column("expires_at", _tz(), nullable=False),
    Column("revoked_at", _tz()),
    PrimaryKeyConstraint("tenant_id", "session_hash"),
    Index("ix_sessions_hash", "session_hash"),
)
"""Dashboard sessions: the SHA-256 of the cookie (a database read yields no usable cookie) and
the digest of the API token that logged in, so removing a token from the config ends its sessions."""

parked_records = Table(
    "parked_records", metadata,
    Column("id", BigInteger().with_variant(Integer, "sqlite"), primary_key=True, autoincrement=True),
    _tenant(),
    Column("consumer", String(100), nullable=False),
    Column("message_id", String(200), nullable=False),
    Column("state", String(16), nullable=False),
    Column("topic", String(200), nullable=False),
    Column("record_partition", Integer, nullable=False),
    Column("record_offset", BigInteger, nullable=False),
    Column("record_timestamp_ms", BigInteger, nullable=False),
    Column("key", LargeBinary),
    Column("value", LargeBinary, nullable=False),
    Column("headers", JSON, nullable=False),
    Column("attempts", Integer, nullable=False),
    Column("error_code", String(64), nullable=False),
    Column("reason", String(1000), nullable=False),
    Column("parked_at", _tz(), nullable=False),
    Column("due_at", _tz(), nullable=False),
    UniqueConstraint("tenant_id", "consumer", "message_id"),
    Index("ix_parked_records_due", "consumer", "state", "due_at"),
)
"""Records a consumer took out of its partition: ``parked`` (a transient failure that outlasted
``consumer.max_hold``; its consumer tries it again from here, with backoff) or ``dead_lettered``
(refused for good; also published to ``ira.dlq.v1``, but the broker may forget, the store does
not). The raw record is kept, so a crash while parked loses nothing."""
