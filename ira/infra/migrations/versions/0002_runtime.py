"""runtime: outbox rows remember whose inbox must come to hold them, so the scanner re-sends

Revision ID: 0002_runtime
Revises: 0001
"""
from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002_runtime"
down_revision = "0001"
branch_labels = ("runtime",)
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("outbox") as batch:
        batch.add_column(sa.Column("awaits", sa.String(100), nullable=True))
        batch.add_column(sa.Column("check_at", sa.DateTime(timezone=True), nullable=True))
        batch.add_column(sa.Column("resends", sa.Integer(), nullable=False, server_default="0"))
    op.create_index("ix_outbox_awaiting", "outbox", ["awaits", "sent_at"])


def downgrade() -> None:
    op.drop_index("ix_outbox_awaiting", table_name="outbox")
    with op.batch_alter_table("outbox") as batch:
        batch.drop_column("resends")
        batch.drop_column("check_at")
        batch.drop_column("awaits")
