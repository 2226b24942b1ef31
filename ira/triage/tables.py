"""Triage's tables, on the store's shared metadata (migration ``0002_triage``, branch ``triage``).

* ``alerts``: every alert event triage applied, with the normalized payload kept for replay.
  Unique on the source identity ``(tenant_id, source_id, source_event_id)``: the durable
  dedupe behind the inbox's event-id dedupe. ``incident_id`` is set when the alert counts in
  an incident (not for silenced or incident-less ones).
* ``incidents``: one *open* incident per group key, enforced by a partial unique index over
  the rows whose ``closed_at`` is NULL. ``version`` moves whenever the incident's alerts change.
* ``changes``: deploys and config changes (ChangeEvent) for the investigators' ``deployments``
  connector; unique on the source identity too.
* ``incident_updates`` (migration ``0008_incident_updates``): one row per run that follow-ups were
  delivered to, its *subscription*: the changes folded since its last update (``changes``,
  NULL when nothing waits), when they must go out (``due_at``), how many updates went out
  (``seq``), what the run was last told (``sent_severity``, ``sent_resolved``) and the
  follow-ups' firing<->resolved flips in the current flapping window. ``version`` is its
  compare-and-set: the consumer that folds and the sweeper that sends due updates race on it.

Evaluations go to the runtime's ``decisions`` table (``ira.runtime.store.schema.decisions``).
"""

from __future__ import annotations

from sqlalchemy import (
    JSON,
    Boolean,
    Column,
    Index,
    Integer,
    PrimaryKeyConstraint,
    String,
    Table,
    Text,
    UniqueConstraint,
    text,
)

from ira.core import limits
from ira.runtime.store.schema import UtcDateTime, metadata

GROUP_KEY_LENGTH = limits.GROUP_KEY_MAX

alerts = Table(
    "alerts", metadata,
    Column("tenant_id", String(64), nullable=False),
    Column("event_id", String(64), nullable=False),
    Column("source_id", String(64), nullable=False),
    Column("source_event_id", String(200), nullable=False),
    Column("fingerprint", String(limits.FINGERPRINT_MAX), nullable=False),
    Column("group_key", String(GROUP_KEY_LENGTH), nullable=False),
    Column("incident_id", String(64)),
    Column("status", String(16), nullable=False),
    Column("severity", String(16), nullable=False),
    Column("name", String(limits.ALERT_NAME_MAX), nullable=False),
    # starts_at of a firing event, ends_at (or receipt) of a resolved one: what "stale" compares
    Column("state_at", UtcDateTime(), nullable=False),
    Column("received_at", UtcDateTime(), nullable=False),
    Column("payload", JSON, nullable=False),
    PrimaryKeyConstraint("tenant_id", "event_id"),
    UniqueConstraint("tenant_id", "source_id", "source_event_id"),
    Index(None, "tenant_id", "incident_id", "fingerprint", "state_at"),
)

incidents = Table(
    "incidents", metadata,
    Column("tenant_id", String(64), nullable=False),
    Column("incident_id", String(64), nullable=False),
    Column("group_key", String(GROUP_KEY_LENGTH), nullable=False),
    Column("status", String(16), nullable=False),
    Column("version", Integer, nullable=False),
    Column("title", String(limits.TITLE_MAX), nullable=False),
    Column("severity", String(16), nullable=False),
    Column("service", String(limits.SERVICE_MAX)),
    Column("environment", String(limits.ENVIRONMENT_MAX)),
    Column("labels", JSON, nullable=False),
    Column("firing_count", Integer, nullable=False),
    Column("opened_at", UtcDateTime(), nullable=False),
    Column("updated_at", UtcDateTime(), nullable=False),
    Column("quiet_until", UtcDateTime()),
    Column("closed_at", UtcDateTime()),
    # when the group key last asked for a run (this incident or an earlier one): the cooldown's anchor
    Column("last_run_at", UtcDateTime()),
    Column("run_evaluation_id", String(64)),  # the create_run evaluation of the latest run request
    PrimaryKeyConstraint("tenant_id", "incident_id"),
    Index("ux_incidents_open_group", "tenant_id", "group_key", unique=True,
          sqlite_where=text("closed_at IS NULL"), postgresql_where=text("closed_at IS NULL")),
    Index(None, "tenant_id", "group_key", "last_run_at"),
    Index(None, "tenant_id", "opened_at"),
)

changes = Table(
    "changes", metadata,
    Column("tenant_id", String(64), nullable=False),
    Column("event_id", String(64), nullable=False),
    Column("source_id", String(64), nullable=False),
    Column("source_event_id", String(200), nullable=False),
    Column("service", String(limits.SERVICE_MAX), nullable=False),
    Column("environment", String(limits.ENVIRONMENT_MAX), nullable=False),
    Column("version", String(limits.VERSION_MAX)),
    Column("commit", String(limits.COMMIT_MAX)),
    Column("actor", String(limits.ACTOR_MAX)),
    Column("at", UtcDateTime(), nullable=False),
    Column("url", Text),
    Column("description", Text),
    Column("received_at", UtcDateTime(), nullable=False),
    PrimaryKeyConstraint("tenant_id", "event_id"),
    UniqueConstraint("tenant_id", "source_id", "source_event_id"),
    Index(None, "tenant_id", "service", "environment", "at"),
)

incident_updates = Table(
    "incident_updates", metadata,
    Column("tenant_id", String(64), nullable=False),
    Column("run_id", String(64), nullable=False),
    Column("incident_id", String(64), nullable=False),
    Column("version", Integer, nullable=False),
    Column("seq", Integer, nullable=False),
    Column("changes", JSON),
    Column("due_at", UtcDateTime()),
    Column("sent_at", UtcDateTime()),
    Column("sent_severity", String(16), nullable=False),
    Column("sent_resolved", Boolean, nullable=False),
    Column("flips", Integer, nullable=False),
    Column("flips_since", UtcDateTime()),
    Column("updated_at", UtcDateTime(), nullable=False),
    PrimaryKeyConstraint("tenant_id", "run_id"),
    Index("ix_incident_updates_due_at", "due_at"),
)
