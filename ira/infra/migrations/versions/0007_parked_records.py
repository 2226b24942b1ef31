"""runtime: records a consumer parked (a transient failure that outlasted consumer.max_hold)
or dead-lettered, kept in the store so neither holds a partition and neither is lost

Revision ID: 0007_parked_records
Revises: 0006_waiting_indexes
"""
from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007_parked_records"
down_revision = "0006_waiting_indexes"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "parked_records",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), autoincrement=True, nullable=False),
        sa.Column("tenant_id", sa.String(64), nullable=False),
        sa.Column("consumer", sa.String(100), nullable=False),
        sa.Column("message_id", sa.String(200), nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("topic", sa.String(200), nullable=False),
        sa.Column("record_partition", sa.Integer(), nullable=False),
        sa.Column("record_offset", sa.BigInteger(), nullable=False),
        sa.Column("record_timestamp_ms", sa.BigInteger(), nullable=False),
        sa.Column("key", sa.LargeBinary(), nullable=True),
        sa.Column("value", sa.LargeBinary(), nullable=False),
        sa.Column("headers", sa.JSON(), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("error_code", sa.String(64), nullable=False),
        sa.Column("reason", sa.String(1000), nullable=False),
        sa.Column("parked_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("due_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_parked_records"),
        sa.UniqueConstraint("tenant_id", "consumer", "message_id", name="uq_parked_records_tenant_id_consumer_message_id"),
    )
    op.create_index("ix_parked_records_due", "parked_records", ["consumer", "state", "due_at"])


def downgrade() -> None:
    op.drop_index("ix_parked_records_due", table_name="parked_records")
    op.drop_table("parked_records")
