"""The replay service's table: one row per replay, with its progress and, once settled, its report."""

from __future__ import annotations

from sqlalchemy import JSON, Column, Index, Integer, PrimaryKeyConstraint, String, Table

from ira.runtime.store.schema import UtcDateTime, metadata

replays = Table(
    "replays", metadata,
    Column("tenant_id", String(64), nullable=False),
    Column("replay_id", String(64), nullable=False),
    Column("bundle_id", String(200), nullable=False),
    Column("state", String(16), nullable=False),  # sending, running, finished, failed
    Column("recording_ref", String(80), nullable=False),  # the artifact the agents answer from
    Column("events_total", Integer, nullable=False),
    Column("events_sent", Integer, nullable=False),
    Column("run_id", String(64)),
    Column("original", JSON, nullable=False),  # the bundle's outcome and expectations, as sent
    Column("report", JSON),  # the comparison, unmet expectations and verdict once settled
    Column("error", String(1000)),
    Column("created_at", UtcDateTime(), nullable=False),
    Column("updated_at", UtcDateTime(), nullable=False),
    PrimaryKeyConstraint("tenant_id", "replay_id"),
    Index(None, "tenant_id", "state"),
)
