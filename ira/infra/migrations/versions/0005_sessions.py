"""runtime: server-side dashboard sessions (opaque cookie -> principal, expiry, revocation)

Revision ID: 0005_sessions
Revises: 0004_run_trace
"""
from __future__ import annotations

import sqlalchemy as sa
from alembic import op


revision = "0005_sessions"
down_revision = "0004_run_trace"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "sessions",
        sa.Column("tenant_id", sa.String(64), nullable=False),
        sa.Column("session_hash", sa.String(64), nullable=False),
        sa.Column("principal", sa.String(200), nullable=False),
        sa.Column("token_digest", sa.String(64), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("revoked_at", sa.DateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("tenant_id", "session_hash", name="pk_sessions"),
    )
    op.create_index("ix_sessions_hash", "sessions", ["session_hash"])


def downgrade() -> None:
    op.drop_index("ix_sessions_hash", table_name="sessions")
    op.drop_table("sessions")
