"""The report and the ticket draft as stored (artifacts) and read (dashboard, Slack, replay).

The coordinator composes them (``ira.coordinator.report``); everyone who shows them parses
these models, so what an approver reads is exactly what was hashed and will be filed.

Each fact has a short ``label`` (``M1`` = the first metrics fact, ``L2`` the second logs
fact, ``R1`` a runbook): hypotheses and the ticket body cite facts by these labels, so a
reader can match a claim to its evidence without comparing 64-character hashes.
"""

from __future__ import annotations

from pydantic import AwareDatetime

from ira.core.model import Model
from ira.core.ticket import TicketRequest


class ReportFact(Model):
    evidence_id: str
    label: str = ""
    """Short, readable, unique within the report: branch initial + ordinal (``M1``)."""
    branch: str
    source: str
    summary: str
    evidence_ref: str
    """The artifact holding the raw observation (or the branch result that carries it)."""
    query: str | None = None
    window_start: AwareDatetime | None = None
    window_end: AwareDatetime | None = None
    partial: bool = False


class ReportHypothesis(Model):
    statement: str
    confidence: float
    evidence_ids: tuple[str, ...]
    evidence_refs: tuple[str, ...]
    evidence_labels: tuple[str, ...] = ()
    """The labels of the facts it cites, in the order cited."""
    unverified: tuple[str, ...] = ()
    confirmed_by: tuple[str, ...] = ()
    """Runbook causes this hypothesis matches (promoted because the data supports it)."""
    origin: str = "synthesis"
    """``synthesis`` (across branches) or the branch whose own hypothesis it is."""


class MissingBranch(Model):
    branch: str
    reason: str


class Report(Model):
    run_id: str
    incident_id: str
    title: str
    severity: str
    service: str | None = None
    environment: str | None = None
    facts: tuple[ReportFact, ...]
    hypotheses: tuple[ReportHypothesis, ...]
    missing: tuple[MissingBranch, ...] = ()
    branch_refs: dict[str, str]
    notes: tuple[str, ...] = ()
    alert_name: str | None = None
    alert_started_at: str | None = None
    alert_labels: dict[str, str] = {}
    alert_annotations: dict[str, str] = {}
    """What the alert itself said: the draft states it, so a run with no branch still drafts a ticket."""


class TicketDraft(Model):
    """What the approver sees and what create_ticket sends; its content hash is its ref."""

    run_id: str
    incident_id: str
    incident_version: int
    report_ref: str
    request: TicketRequest
    evidence_refs: tuple[str, ...]
