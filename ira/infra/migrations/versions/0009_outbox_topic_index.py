"""runtime: a partial index over the unsent outbox rows by topic, so the relay's lane with no
unsent row reads nothing instead of walking every unsent row of the other topics per pass

Revision ID: 0009_outbox_topic_index
Revises: 0007_parked_records
"""
from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0009_outbox_topic_index"
down_revision = "0007_parked_records"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index("ix_outbox_unsent_topic", "outbox", ["topic", "id"], sqlite_where=sa.text("sent_at IS NULL"),
                    postgresql_where=sa.text("sent_at IS NULL"))


def downgrade() -> None:
    op.drop_index("ix_outbox_unsent_topic", table_name="outbox")
