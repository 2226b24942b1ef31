"""runtime: partial indexes over the waiting rows the scanner counts every round (approvals
pending, Operations unknown, deliveries pending), so its backlog read costs the queue's size

Revision ID: 0006_waiting_indexes
Revises: 0005_sessions
"""
from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006_waiting_indexes"
down_revision = "0005_sessions"
branch_labels = None
depends_on = None

_INDEXES = (
    ("ix_approvals_pending", "approvals", "created_at", "state = 'pending'"),
    ("ix_operations_unknown", "operations", "updated_at", "fact_state = 'unknown'"),
    ("ix_deliveries_pending", "deliveries", "created_at", "state = 'pending'"),
)


def upgrade() -> None:
    for name, table, column, where in _INDEXES:
        op.create_index(name, table, [column], sqlite_where=sa.text(where), postgresql_where=sa.text(where))


def downgrade() -> None:
    for name, table, _, _ in _INDEXES:
        op.drop_index(name, table_name=table)
