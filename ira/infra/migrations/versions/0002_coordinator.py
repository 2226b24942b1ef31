"""coordinator: builtin tickets (tickets, counters, epoch barriers) and versioned ticket drafts

Revision ID: 0002_coordinator
Revises: 0001
"""
from __future__ import annotations

import sqlalchemy as sa
from alembic import op


revision = "0002_coordinator"
down_revision = "0001"
branch_labels = ("coordinator",)
depends_on = None


def upgrade() -> None:
    op.create_table(
        "tickets",
        sa.Column("tenant_id", sa.String(64), nullable=False),
        sa.Column("key", sa.String(32), nullable=False),
        sa.Column("number", sa.Integer(), nullable=False),
        sa.Column("idempotency_key", sa.String(200), nullable=False),
        sa.Column("payload_hash", sa.String(100), nullable=False),
        sa.Column("title", sa.String(300), nullable=False),
        sa.Column("body", sa.Text(), nullable=False),
        sa.Column("severity", sa.String(16), nullable=False),
        sa.Column("service", sa.String(200), nullable=True),
        sa.Column("incident_id", sa.String(64), nullable=False),
        sa.Column("labels", sa.JSON(), nullable=False),
        sa.Column("namespace", sa.String(200), nullable=False),
        sa.Column("epoch", sa.Integer(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("tenant_id", "key", name=op.f("pk_tickets")),
        sa.UniqueConstraint("tenant_id", "idempotency_key", name=op.f("uq_tickets_tenant_id_idempotency_key")),
        sa.UniqueConstraint("tenant_id", "number", name=op.f("uq_tickets_tenant_id_number")),
    )
    op.create_table(
        "ticket_counters",
        sa.Column("tenant_id", sa.String(64), nullable=False),
        sa.Column("last_number", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("tenant_id", name=op.f("pk_ticket_counters")),
    )
    op.create_table(
        "ticket_barriers",
        sa.Column("tenant_id", sa.String(64), nullable=False),
        sa.Column("namespace", sa.String(200), nullable=False),
        sa.Column("epoch", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("tenant_id", "namespace", name=op.f("pk_ticket_barriers")),
    )
    op.create_table(
        "ticket_drafts",
        sa.Column("tenant_id", sa.String(64), nullable=False),
        sa.Column("run_id", sa.String(64), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("ref", sa.String(80), nullable=False),
        sa.Column("incident_version", sa.Integer(), nullable=False),
        sa.Column("reason", sa.String(64), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("tenant_id", "run_id", "version", name=op.f("pk_ticket_drafts")),
    )


def downgrade() -> None:
    for table in ("ticket_drafts", "ticket_barriers", "ticket_counters", "tickets"):
        op.drop_table(table)
