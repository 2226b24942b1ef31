"""triage: alerts (source-identity unique), incidents (one open per group key), changes

Revision ID: 0002_triage
Revises: 0001
"""
from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002_triage"
down_revision = "0001"
branch_labels = ("triage",)
depends_on = None


def _tenant() -> sa.Column:
    return sa.Column("tenant_id", sa.String(64), nullable=False)


def upgrade() -> None:
    op.create_table(
        "alerts",
        _tenant(),
        sa.Column("event_id", sa.String(64), nullable=False),
        sa.Column("source_id", sa.String(64), nullable=False),
        sa.Column("source_event_id", sa.String(200), nullable=False),
        sa.Column("fingerprint", sa.String(200), nullable=False),
        sa.Column("group_key", sa.String(500), nullable=False),
        sa.Column("incident_id", sa.String(64), nullable=True),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("severity", sa.String(16), nullable=False),
        sa.Column("name", sa.String(200), nullable=False),
        sa.Column("state_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("received_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("payload", sa.JSON(), nullable=False),
        sa.PrimaryKeyConstraint("tenant_id", "event_id", name=op.f("pk_alerts")),
        sa.UniqueConstraint("tenant_id", "source_id", "source_event_id",
                            name=op.f("uq_alerts_tenant_id_source_id_source_event_id")),
    )
    op.create_index("ix_alerts_tenant_id_incident_id_fingerprint_state_at", "alerts",
                    ["tenant_id", "incident_id", "fingerprint", "state_at"])
    op.create_table(
        "incidents",
        _tenant(),
        sa.Column("incident_id", sa.String(64), nullable=False),
        sa.Column("group_key", sa.String(500), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("title", sa.String(300), nullable=False),
        sa.Column("severity", sa.String(16), nullable=False),
        sa.Column("service", sa.String(200), nullable=True),
        sa.Column("environment", sa.String(64), nullable=True),
        sa.Column("labels", sa.JSON(), nullable=False),
        sa.Column("firing_count", sa.Integer(), nullable=False),
        sa.Column("opened_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("quiet_until", sa.DateTime(timezone=True), nullable=True),
        sa.Column("closed_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("last_run_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("run_evaluation_id", sa.String(64), nullable=True),
        sa.PrimaryKeyConstraint("tenant_id", "incident_id", name=op.f("pk_incidents")),
    )
    op.create_index("ux_incidents_open_group", "incidents", ["tenant_id", "group_key"], unique=True,
                    sqlite_where=sa.text("closed_at IS NULL"), postgresql_where=sa.text("closed_at IS NULL"))
    op.create_index("ix_incidents_tenant_id_group_key_last_run_at", "incidents",
                    ["tenant_id", "group_key", "last_run_at"])
    op.create_index("ix_incidents_tenant_id_opened_at", "incidents", ["tenant_id", "opened_at"])
    op.create_table(
        "changes",
        _tenant(),
        sa.Column("event_id", sa.String(64), nullable=False),
        sa.Column("source_id", sa.String(64), nullable=False),
        sa.Column("source_event_id", sa.String(200), nullable=False),
        sa.Column("service", sa.String(200), nullable=False),
        sa.Column("environment", sa.String(64), nullable=False),
        sa.Column("version", sa.String(200), nullable=True),
        sa.Column("commit", sa.String(100), nullable=True),
        sa.Column("actor", sa.String(200), nullable=True),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("url", sa.Text(), nullable=True),
        sa.Column("description", sa.Text(), nullable=True),
        sa.Column("received_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("tenant_id", "event_id", name=op.f("pk_changes")),
        sa.UniqueConstraint("tenant_id", "source_id", "source_event_id",
                            name=op.f("uq_changes_tenant_id_source_id_source_event_id")),
    )
    op.create_index("ix_changes_tenant_id_service_environment_at", "changes",
                    ["tenant_id", "service", "environment", "at"])


def downgrade() -> None:
    op.drop_table("changes")
    op.drop_table("incidents")
    op.drop_table("alerts")
