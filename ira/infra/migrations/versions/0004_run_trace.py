"""runtime: a run remembers the trace of the work that started it (one trace per run)

Revision ID: 0004_run_trace
Revises: 0002_runtime
"""
from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004_run_trace"
down_revision = "0002_runtime"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("runs") as batch:
        batch.add_column(sa.Column("traceparent", sa.String(64), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("runs") as batch:
        batch.drop_column("traceparent")
