"""coordinator: an Operation records where its ticket lives (system, URL) and why it failed

Revision ID: 0003_ticket_receipts
Revises: 0002_coordinator
"""
from __future__ import annotations

import sqlalchemy as sa
from alembic import op


revision = "0003_ticket_receipts"
down_revision = "0002_coordinator"
branch_labels = None
depends_on = None

_COLUMNS = (("external_system", 32), ("external_url", 1000), ("error", 1000))


def upgrade() -> None:
    with op.batch_alter_table("operations") as batch:
        for name, length in _COLUMNS:
            batch.add_column(sa.Column(name, sa.String(length), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("operations") as batch:
        for name, _ in reversed(_COLUMNS):
            batch.drop_column(name)
