"""runtime: outbox.urgent, a message its writer asked to be relayed before every lane (the first
alert of a group the edge has not seen lately: likely a new incident's), and a partial index over
the unsent urgent rows, so the relay's first claim of each pass reads those few, not the backlog

Revision ID: 0010_outbox_urgent
Revises: 0009_outbox_topic_index
"""
from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0010_outbox_urgent"
down_revision = "0009_outbox_topic_index"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("outbox", sa.Column("urgent", sa.Boolean(), nullable=False, server_default=sa.false()))
    op.create_index("ix_outbox_urgent_unsent", "outbox", ["id"], sqlite_where=sa.text("urgent = 1 AND sent_at IS NULL"),
                    postgresql_where=sa.text("urgent = true AND sent_at IS NULL"))


def downgrade() -> None:
    op.drop_index("ix_outbox_urgent_unsent", table_name="outbox")
    with op.batch_alter_table("outbox") as batch:
        batch.drop_column("urgent")
