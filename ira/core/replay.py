"""A run's outcome as a replay compares it, the comparison itself and a team's expectations.

Pure: the original outcome comes from a bundle, the replay's from the read API; both are the
same model, so a comparison is field by field. What differs by construction (times: a replay
happens now; ids; the replay's own labels; ``staging`` for the original's environment) is
masked before comparing, so a replay that decided the same things compares equal.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass
from functools import partial
from typing import Any

from pydantic import Field

from ira.core.model import Model

TOP_HYPOTHESES = 3
STAGING = "staging"
REPLAY_LABEL = "ira_replay"
"""Label set on every alert a replay sends: the replay it belongs to."""
RECORDING_LABEL = "ira_recording"
"""Label naming the artifact of the bundle's recording: staging branches answer from it."""
SANDBOX_TICKETS = "sandbox"
"""The only ticket target a staging run may bind."""


def sandbox_tenant(tenant_id: str) -> str:
    """Where a tenant's sandbox tickets are kept: ``~`` is not allowed in a tenant's name, so no
    real tenant can see or collide with them."""
    return f"~{tenant_id}"
STAGING_SINK = "staging-sink"
"""The only notification target a staging run may bind: records the notification, sends nothing."""


def run_targets(environment: str, *, notifications: str) -> dict[str, str]:
    """What a run may write to, bound when it is created and checked again at dispatch."""
    if environment == STAGING:
        return {"tickets": SANDBOX_TICKETS, "notifications": STAGING_SINK}
    return {"tickets": "tenant", "notifications": notifications}


def staging_refusal(environment: str, targets: object, kind: str) -> str | None:
    """Why a staging run may not use its bound ``kind`` target (None: it may, or it is not staging).

    Checked at dispatch from the stored binding, so a binding changed after the run was
    created (by hand, by a bug) still never reaches production.
    """
    if environment != STAGING:
        return None
    bound = targets.get(kind) if isinstance(targets, dict) else None
    allowed = SANDBOX_TICKETS if kind == "tickets" else STAGING_SINK
    return None if bound == allowed else f"staging_production_target: {kind} bound to {bound!r}"


class BranchOutcome(Model):
    stop_reason: str
    error: str | None = None
    hypotheses: list[str] = Field(default_factory=list)
    evidence: list[str] = Field(default_factory=list)


class Outcome(Model):
    """What a run did (``outcome.json`` of a bundle, or read back from a replay's run)."""

    run_state: str | None = None
    decisions: list[str] = Field(default_factory=list)
    """Triage's decisions for the incident (``create_run``, ``ignore: duplicate``, ...)."""
    branches: dict[str, BranchOutcome] = Field(default_factory=dict)
    hypotheses: list[str] = Field(default_factory=list)
    """The report's hypotheses, strongest first."""
    facts: list[str] = Field(default_factory=list)
    draft_title: str | None = None
    draft_body: str | None = None
    approvals: list[str] = Field(default_factory=list)
    """``action: state[ by who]`` per approval (``create_ticket: approved by ira (auto, staging)``)."""
    operations: list[str] = Field(default_factory=list)
    """``kind: fact state`` per Operation."""
    budget_used: dict[str, int] = Field(default_factory=dict)
    duration_seconds: float | None = None


class BranchExpectation(Model):
    stop_reason: str | None = None
    evidence_contains: list[str] = Field(default_factory=list)
    hypotheses_contain: list[str] = Field(default_factory=list)
    first_runbook: str | None = None


class Expectations(Model):
    """``expectations.json``: a team's own pass/fail rules for a replay of a bundle."""

    alert: str | None = None
    service: str | None = None
    version: str | None = None
    run_state: str | None = None
    branches: dict[str, BranchExpectation] = Field(default_factory=dict)
    ticket_draft_mentions: list[str] = Field(default_factory=list)
    scenario: dict[str, Any] | None = None
    """The scenario generator's answer key (cause, cited evidence): graded by bench/investigation.py."""


class Row(Model):
    """One line of the comparison: an aspect, both sides as text, and whether they agree."""

    aspect: str
    original: str
    replay: str
    same: bool


class Comparison(Model):
    rows: tuple[Row, ...]
    draft_diff: tuple[str, ...]
    """Unified diff of the draft body (empty: identical or no original draft)."""

    @property
    def differences(self) -> tuple[Row, ...]:
        return tuple(r for r in self.rows if not r.same)


def _text(value: object) -> str:
    if value is None or value == [] or value == {}:
        return "-"
    if isinstance(value, list):
        return "; ".join(map(str, value))
    if isinstance(value, dict):
        return ", ".join(f"{k}={v}" for k, v in sorted(value.items()))
    return str(value)


_TIME = re.compile(r"\b\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}(?::\d{2}(?:\.\d+)?)?(?:Z|[+-]\d{2}:?\d{2})?")
_ID = re.compile(r"\b[a-z]{2,5}_[0-9a-f]{20,}\b|\bsha256:[0-9a-f]{64}\b")
_REPLAY_LABELS = re.compile(rf"\b(?:{REPLAY_LABEL}|{RECORDING_LABEL}|environment)=[^,\s]+(?:, )?")


@dataclass(frozen=True)
class Volatile:
    """What differs between a run and its replay by construction, and is masked before comparing:
    times (a replay happens now), ids, the replay's own labels, and the environment's name."""

    environment: str | None = None
    """The original's environment: ``staging`` in the replay's text reads as this."""

    def mask(self, value: object) -> object:
        if isinstance(value, str):
            text = _REPLAY_LABELS.sub("", _ID.sub("<id>", _TIME.sub("<time>", value)))
            return re.sub(rf"\b{STAGING}\b", self.environment, text) if self.environment else text
        if isinstance(value, list):
            return [self.mask(v) for v in value]
        if isinstance(value, dict):
            return {k: self.mask(v) for k, v in value.items()}
        return value


def _row(aspect: str, original: object, replay: object, *, compared: bool = True,
         volatile: Volatile = Volatile()) -> Row:
    return Row(aspect=aspect, original=_text(original), replay=_text(replay),
               same=(not compared) or volatile.mask(original) == volatile.mask(replay))


def compare(original: Outcome, replay: Outcome, *, volatile: Volatile = Volatile()) -> Comparison:
    """Field by field, ``volatile`` parts masked. Aspects the original does not know (an old bundle)
    are shown, not judged; duration is always shown only: a replay runs at another speed."""
    row = partial(_row, volatile=volatile)
    rows = [row("run state", original.run_state, replay.run_state, compared=original.run_state is not None),
            row("triage decisions", original.decisions, replay.decisions, compared=bool(original.decisions))]
    for name in sorted(set(original.branches) | set(replay.branches)):
        before, after = original.branches.get(name), replay.branches.get(name)
        rows.append(row(f"branch {name}", _branch(before), _branch(after)))
    rows += [
        row("top hypotheses", original.hypotheses[:TOP_HYPOTHESES], replay.hypotheses[:TOP_HYPOTHESES],
            compared=bool(original.hypotheses)),
        row("facts", original.facts, replay.facts, compared=bool(original.facts)),
        row("draft title", original.draft_title, replay.draft_title, compared=original.draft_title is not None),
        row("approvals", original.approvals, replay.approvals, compared=bool(original.approvals)),
        row("operations", original.operations, replay.operations, compared=bool(original.operations)),
        row("budget used", original.budget_used, replay.budget_used, compared=bool(original.budget_used)),
        row("duration (s)", original.duration_seconds, replay.duration_seconds, compared=False),
    ]
    diff: tuple[str, ...] = ()
    if original.draft_body is not None:
        was, now = (str(volatile.mask(body or "")).splitlines() for body in (original.draft_body, replay.draft_body))
        diff = tuple(difflib.unified_diff(was, now, "original draft", "replay draft", lineterm=""))
        rows.append(Row(aspect="draft body", original="recorded", replay="identical" if not diff else "differs",
                        same=not diff))
    return Comparison(rows=tuple(rows), draft_diff=diff)


def _branch(branch: BranchOutcome | None) -> str | None:
    if branch is None:
        return None
    return branch.stop_reason + (f" ({branch.error})" if branch.error else "")


def unmet_expectations(expectations: Expectations, replay: Outcome) -> list[str]:
    """Every expectation the replay misses (empty: all met)."""
    missing = []
    if expectations.run_state and replay.run_state != expectations.run_state:
        missing.append(f"run: state {replay.run_state}, expected {expectations.run_state}")
    for name, wanted in sorted(expectations.branches.items()):
        missing += _unmet_branch(name, wanted, replay.branches.get(name))
    draft = f"{replay.draft_title or ''}\n{replay.draft_body or ''}"
    missing += [f"draft: does not mention {word!r}" for word in expectations.ticket_draft_mentions
                if word not in draft]
    return missing


def _unmet_branch(name: str, wanted: BranchExpectation, got: BranchOutcome | None) -> list[str]:
    if got is None:
        return [f"{name}: no result"]
    missing = []
    if wanted.stop_reason and got.stop_reason != wanted.stop_reason:
        missing.append(f"{name}: stopped {got.stop_reason}, expected {wanted.stop_reason}")
    evidence, hypotheses = " | ".join(got.evidence), " | ".join(got.hypotheses)
    missing += [f"{name}: no evidence mentions {p!r}" for p in wanted.evidence_contains if p not in evidence]
    missing += [f"{name}: no hypothesis mentions {p!r}" for p in wanted.hypotheses_contain if p not in hypotheses]
    if wanted.first_runbook and not (got.evidence and wanted.first_runbook in got.evidence[0]):
        missing.append(f"{name}: first runbook is not {wanted.first_runbook}")
    return missing
