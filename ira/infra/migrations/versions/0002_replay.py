"""replay: replays (one row per staging replay of a bundle: progress, run, report)

Revision ID: 0002_replay
Revises: 0001
"""
from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002_replay"
down_revision = "0001"
branch_labels = ("replay",)
depends_on = None


def upgrade() -> None:
    op.create_table(
        "replays",
        sa.Column("tenant_id", sa.String(length=64), nullable=False),
        sa.Column("replay_id", sa.String(length=64), nullable=False),
        sa.Column("bundle_id", sa.String(length=200), nullable=False),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("recording_ref", sa.String(length=80), nullable=False),
        sa.Column("events_total", sa.Integer(), nullable=False),
        sa.Column("events_sent", sa.Integer(), nullable=False),
        sa.Column("run_id", sa.String(length=64), nullable=True),
        sa.Column("original", sa.JSON(), nullable=False),
        sa.Column("report", sa.JSON(), nullable=True),
        sa.Column("error", sa.String(length=1000), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("tenant_id", "replay_id", name=op.f("pk_replays")),
    )
    op.create_index(op.f("ix_replays_tenant_id_state"), "replays", ["tenant_id", "state"])


def downgrade() -> None:
    op.drop_index(op.f("ix_replays_tenant_id_state"), table_name="replays")
    op.drop_table("replays")
