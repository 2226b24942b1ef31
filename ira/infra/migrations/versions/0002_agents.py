"""agents: agent_turns (the committed turns of each branch loop)

Revision ID: 0002_agents
Revises: 0001
"""
from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002_agents"
down_revision = "0001"
branch_labels = ("agents",)
depends_on = None


def upgrade() -> None:
    op.create_table(
        "agent_turns",
        sa.Column("tenant_id", sa.String(length=64), nullable=False),
        sa.Column("run_id", sa.String(length=64), nullable=False),
        sa.Column("step_id", sa.String(length=64), nullable=False),
        sa.Column("turn", sa.Integer(), nullable=False),
        sa.Column("attempt_id", sa.String(length=64), nullable=False),
        sa.Column("owner_epoch", sa.Integer(), nullable=False),
        sa.Column("proposal", sa.JSON(), nullable=False),
        sa.Column("observation_ref", sa.String(length=80), nullable=True),
        sa.Column("model", sa.String(length=200), nullable=True),
        sa.Column("prompt_hash", sa.String(length=80), nullable=True),
        sa.Column("input_tokens", sa.Integer(), nullable=False),
        sa.Column("output_tokens", sa.Integer(), nullable=False),
        sa.Column("cost_micros", sa.Integer(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("tenant_id", "run_id", "step_id", "turn", name=op.f("pk_agent_turns")),
    )


def downgrade() -> None:
    op.drop_table("agent_turns")
