"""What a person is shown in a chat channel about a run, as data (no rendering, no I/O).

``ApprovalMessage`` is everything needed to decide on a ticket draft without opening
anything else (the notifier builds it from the read model: the draft the approval binds, the
report behind it). ``ApprovalStatus`` is what happened to that approval since (decided,
expired, superseded, ticket created): the message is re-rendered from both.
Renderers (Slack Block Kit in ``ira.connectors.slack.render``) are pure functions of these.
"""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum

from ira.core.model import Model


class Finding(Model):
    """One fact or hypothesis of the report, with what it cites."""

    text: str
    source: str | None = None
    confidence: float | None = None
    """Hypotheses only: the investigator's confidence, 0..1."""
    cites: tuple[str, ...] = ()
    """Evidence ids (a fact cites its own artifact ref)."""


class ApprovalMessage(Model):
    """The draft to approve and the report behind it, as the approver must see it."""

    run_id: str
    incident_id: str
    approval_id: str
    title: str
    severity: str
    service: str | None = None
    environment: str | None = None
    opened_at: datetime | None = None
    facts: tuple[Finding, ...] = ()
    hypotheses: tuple[Finding, ...] = ()
    missing: tuple[str, ...] = ()
    """Branches that failed or are missing, each with its reason."""
    draft_title: str
    draft_body: str
    draft_version: int
    draft_hash: str
    resource_version: int
    approver_role: str
    expires_at: datetime
    run_url: str | None = None


class ApprovalOutcome(StrEnum):
    PENDING = "pending"
    APPROVED = "approved"
    REJECTED = "rejected"
    EXPIRED = "expired"
    SUPERSEDED = "superseded"  #: the draft or the incident changed; a new draft was posted
    ENDED = "ended"  #: the run ended otherwise (cancelled)


class ApprovalStatus(Model):
    """What became of the approval, for the updated message."""

    outcome: ApprovalOutcome
    principal: str | None = None
    chat_user: str | None = None
    """The chat user who decided, when the decision came from chat."""
    at: datetime | None = None
    reason: str | None = None
    ticket_key: str | None = None
    ticket_url: str | None = None
    """The ticket at its system (Jira, GitHub); None for ira's builtin tickets."""


class ChatRef(Model):
    """Where a posted message lives: channel id and message timestamp (Slack's id)."""

    channel: str
    ts: str
    thread_ts: str | None = None
