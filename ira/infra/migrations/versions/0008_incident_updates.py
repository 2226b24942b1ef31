"""triage: incident_updates, each active run's subscription (follow-ups folded, sent per interval)

Revision ID: 0008_incident_updates
Revises: 0002_triage
"""
from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0008_incident_updates"
down_revision = "0002_triage"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "incident_updates",
        sa.Column("tenant_id", sa.String(64), nullable=False),
        sa.Column("run_id", sa.String(64), nullable=False),
        sa.Column("incident_id", sa.String(64), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("seq", sa.Integer(), nullable=False),
        sa.Column("changes", sa.JSON(), nullable=True),
        sa.Column("due_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("sent_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("sent_severity", sa.String(16), nullable=False),
        sa.Column("sent_resolved", sa.Boolean(), nullable=False),
        sa.Column("flips", sa.Integer(), nullable=False),
        sa.Column("flips_since", sa.DateTime(timezone=True), nullable=True),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("tenant_id", "run_id", name=op.f("pk_incident_updates")),
    )
    op.create_index("ix_incident_updates_due_at", "incident_updates", ["due_at"])


def downgrade() -> None:
    op.drop_index("ix_incident_updates_due_at", table_name="incident_updates")
    op.drop_table("incident_updates")
