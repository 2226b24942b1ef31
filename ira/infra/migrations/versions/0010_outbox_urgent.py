"""runtime: outbox.urgent, a message its writer asked its consumer to take first (the first alert
of a group the edge has not seen lately: likely a new incident's)

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


def downgrade() -> None:
    with op.batch_alter_table("outbox") as batch:
        batch.drop_column("urgent")
