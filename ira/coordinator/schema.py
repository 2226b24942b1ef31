"""The coordinator's own table (migration ``0002_coordinator``): versioned ticket drafts.

A draft is content-addressed (``ref`` = sha256 of its canonical JSON); each revision of a
run's draft gets the next ``version``. Approvals bind to one ref, so a new version can never
be authorized by an approval given for an older one.
"""

from __future__ import annotations

from sqlalchemy import Column, Integer, PrimaryKeyConstraint, String, Table

from ira.runtime.store.schema import UtcDateTime, metadata

ticket_drafts = Table(
    "ticket_drafts", metadata,
    Column("tenant_id", String(64), nullable=False),
    Column("run_id", String(64), nullable=False),
    Column("version", Integer, nullable=False),
    Column("ref", String(80), nullable=False),
    Column("incident_version", Integer, nullable=False),
    Column("reason", String(64), nullable=False),
    Column("created_at", UtcDateTime(), nullable=False),
    PrimaryKeyConstraint("tenant_id", "run_id", "version"),
)
