"""The coordinator's view of the configuration: one frozen object built by ``main.py``."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import timedelta

from ira.core.budget import BudgetDimension
from ira.core.investigation import BranchKind
from ira.core.redact import Redactor
from ira.runtime.settings import Settings


@dataclass(frozen=True)
class WorkflowConfig:
    """What ``incident-diagnosis@1`` needs to know; tests build it directly."""

    environment: str = "prod"
    window_before: timedelta = timedelta(minutes=30)
    branch_deadline: timedelta = timedelta(minutes=10)
    approval_expiry: timedelta = timedelta(minutes=30)
    operation_deadline: timedelta = timedelta(minutes=5)
    on_required_failure: str = "human_review"
    change_lookback: timedelta = timedelta(hours=6)
    dependencies: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    sources: frozenset[str] = frozenset(k.value for k in BranchKind)
    """The branches whose data source is configured: only these are planned, the others are stated gaps."""
    root_budget: Mapping[BudgetDimension, int] = field(default_factory=lambda: {
        BudgetDimension.STEPS: 96, BudgetDimension.TOOL_CALLS: 120})
    branch_budget: Mapping[BudgetDimension, int] = field(default_factory=lambda: {
        BudgetDimension.STEPS: 28, BudgetDimension.TOOL_CALLS: 36})
    artifact_max_bytes: int = 1024 * 1024
    approver_role: str = "approver"
    notification_channel: str = "webhook"
    """Where notifications go: ``slack`` when Slack is configured, else the webhook channel."""
    dashboard_url: str | None = None
    """Base of run links in notifications (``<dashboard_url>/runs/<run_id>``)."""
    staging_auto_approve: bool = False
    """Staging runs' approvals are granted by ira itself (``AUTO_APPROVER``); never a production run's."""
    redactor: Redactor = field(default_factory=Redactor)
    """Masks configured secrets and secret-shaped text where outside text enters a run (the
    alert) and where a run's text leaves it (the ticket draft)."""

    @classmethod
    def from_settings(cls, settings: Settings) -> WorkflowConfig:
        c = settings.coordinator
        return cls(environment=settings.environment, window_before=c.window_before,
                   branch_deadline=c.branch_deadline, approval_expiry=settings.approval_expiry,
                   operation_deadline=c.operation_deadline, on_required_failure=c.on_required_failure,
                   change_lookback=c.change_lookback, dependencies=dict(c.dependencies),
                   sources=settings.agents.configured_sources(),
                   root_budget=dict(c.root_budget), branch_budget=dict(c.branch_budget),
                   artifact_max_bytes=settings.artifact_max_bytes,
                   notification_channel="slack" if settings.slack.enabled else "webhook",
                   dashboard_url=settings.slack.dashboard_url.rstrip("/"), redactor=settings.redactor(),
                   staging_auto_approve=c.staging_auto_approve)

    def run_url(self, run_id: str) -> str | None:
        return f"{self.dashboard_url}/runs/{run_id}" if self.dashboard_url else None
