"""The report and the ticket draft, composed from accepted branch results. Pure.

Facts (what a tool observed) are kept apart from hypotheses (what might explain them).
Hypotheses come from the synthesis across branches (:mod:`synthesis`), then from branches'
own hypotheses that no synthesized candidate covers (an LLM branch's, say). A hypothesis stays
only if it cites evidence the report actually holds, and carries the refs of that evidence,
its confidence and what is still unverified; a missing optional branch is said out loud in
both the report and the draft.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from ira.coordinator.synthesis import Item, parse_time, synthesize
from ira.coordinator.workflow import NOT_CONFIGURED
from ira.core.investigation import BranchResult, StopReason
from ira.core.model import Model
from ira.core.redact import Redactor
from ira.core.report import MissingBranch, Report, ReportFact, ReportHypothesis, TicketDraft
from ira.core.ticket import TicketRequest


class AcceptedBranch(Model):
    """A branch the join accepted: its result and the artifact it came from."""

    branch: str
    result_ref: str
    result: BranchResult


def canonical_json(model: Model) -> bytes:
    """Sorted keys, no whitespace: equal content always hashes equal."""
    return json.dumps(model.model_dump(mode="json"), sort_keys=True, separators=(",", ":")).encode()


def compose_report(
    *, run_id: str, bindings: Mapping[str, Any], accepted: Sequence[AcceptedBranch], missing: Sequence[MissingBranch],
) -> Report:
    facts = _labelled([_fact(b, e) for b in accepted for e in b.result.evidence])
    by_id = {f.evidence_id: f for f in facts}
    gaps = tuple(f"{m.branch} branch missing: {m.reason}" for m in missing)
    found = synthesize([Item(e, b.branch) for b in accepted for e in b.result.evidence],
                       service=bindings.get("service"), alert_started_at=parse_time(bindings.get("alert_started_at")))
    hypotheses = [_hypothesis(c.statement, c.confidence, c.evidence_ids, by_id, unverified=(*c.unverified, *gaps),
                              confirmed_by=tuple(c.runbooks)) for c in found.candidates]
    notes = list(found.notes)
    for branch in accepted:
        for h in branch.result.hypotheses:
            cited = tuple(e for e in h.evidence_ids if e in by_id)
            if not cited:
                notes.append(f"dropped a {branch.branch} hypothesis citing no held evidence: {h.statement!r}")
            elif not set(cited) & found.used:  # not already part of a synthesized candidate
                hypotheses.append(_hypothesis(h.statement, round(h.confidence * BRANCH_ONLY, 2), cited, by_id,
                                              unverified=(*h.unverified, *gaps), origin=branch.branch))
    hypotheses = [h for h in hypotheses if h.evidence_ids]
    hypotheses.sort(key=lambda h: -h.confidence)
    if not accepted:
        notes.append(_no_evidence_note(missing))
    return Report(run_id=run_id, incident_id=str(bindings["incident_id"]), title=str(bindings.get("title") or ""),
                  severity=str(bindings.get("severity") or "warning"), service=bindings.get("service"),
                  environment=bindings.get("environment"), facts=tuple(facts), hypotheses=tuple(hypotheses),
                  missing=tuple(missing), branch_refs={b.branch: b.result_ref for b in accepted}, notes=tuple(notes),
                  alert_name=bindings.get("alert_name"), alert_started_at=bindings.get("alert_started_at"),
                  alert_labels=_strings(bindings.get("alert_labels")),
                  alert_annotations=_strings(bindings.get("alert_annotations")))


NO_SOURCE = "no data source configured"


def _no_evidence_note(missing: Sequence[MissingBranch]) -> str:
    """Why the report holds no fact: nothing was configured, or nothing that ran was accepted."""
    if all(m.reason == NOT_CONFIGURED for m in missing):
        return f"{NO_SOURCE}: this draft is made from the alert alone, no investigation ran"
    return "no branch returned accepted evidence: this draft is made from the alert alone"


def _strings(value: object) -> dict[str, str]:
    return {str(k): str(v) for k, v in value.items()} if isinstance(value, Mapping) else {}


def _labelled(facts: Sequence[ReportFact]) -> list[ReportFact]:
    """Give each fact its short label: the branch's initial and its ordinal in that branch."""
    counts: dict[str, int] = {}
    out = []
    for fact in facts:
        counts[fact.branch] = counts.get(fact.branch, 0) + 1
        out.append(fact.model_copy(update={"label": f"{fact.branch[:1].upper()}{counts[fact.branch]}"}))
    return out


BRANCH_ONLY = 0.8
"""A branch's own hypothesis that no synthesized candidate covers counts a little less: one branch's view."""


def _hypothesis(statement: str, confidence: float, cited: tuple[str, ...], by_id: Mapping[str, ReportFact], *,
                unverified: tuple[str, ...], confirmed_by: tuple[str, ...] = (), origin: str = "synthesis",
                ) -> ReportHypothesis:
    held = tuple(e for e in cited if e in by_id)
    return ReportHypothesis(statement=statement[:500], confidence=confidence, evidence_ids=held,
                            evidence_refs=tuple(dict.fromkeys(by_id[e].evidence_ref for e in held)),
                            evidence_labels=tuple(by_id[e].label for e in held), unverified=unverified,
                            confirmed_by=confirmed_by, origin=origin)


def _fact(branch: AcceptedBranch, evidence: Any) -> ReportFact:
    partial = evidence.partial or branch.result.stop_reason != StopReason.DONE
    return ReportFact(evidence_id=evidence.evidence_id, branch=branch.branch, source=evidence.source,
                      summary=evidence.summary, evidence_ref=evidence.artifact_ref or branch.result_ref,
                      query=evidence.query, window_start=evidence.window_start, window_end=evidence.window_end,
                      partial=partial)


def compose_draft(
    report: Report, *, report_ref: str, tenant_id: str, incident_version: int, updates: Sequence[str] = (),
    redactor: Redactor | None = None,
) -> TicketDraft:
    """The ticket for ``report``; ``updates`` are notes appended when the incident changed.
    Title and body pass the redactor: the draft is what leaves for the ticket system and Slack."""
    service = f" {report.service}:" if report.service else ""
    redactor = redactor or Redactor()
    request = TicketRequest(
        tenant_id=tenant_id, title=redactor.text(f"[{report.severity}]{service} {report.title}".strip()),
        body=redactor.text(render_body(report, incident_version=incident_version, updates=updates)),
        severity=report.severity,
        service=report.service, incident_id=report.incident_id,
        labels={"source": "ira", "run_id": report.run_id})
    refs = tuple(dict.fromkeys(f.evidence_ref for f in report.facts))
    return TicketDraft(run_id=report.run_id, incident_id=report.incident_id, incident_version=incident_version,
                       report_ref=report_ref, request=request, evidence_refs=refs)


ANNOTATIONS_SHOWN = ("summary", "description", "runbook_url")


def _alert_lines(report: Report) -> list[str]:
    """The alert as it fired: name, start, its summary/description/runbook and its labels."""
    if not report.alert_name:
        return []
    lines = ["", "## Alert", f"- **{report.alert_name}**"
             + (f" firing since {report.alert_started_at}" if report.alert_started_at else "")]
    lines += [f"- {k}: {report.alert_annotations[k]}" for k in ANNOTATIONS_SHOWN if report.alert_annotations.get(k)]
    if report.alert_labels:
        lines.append("- labels: " + ", ".join(f"{k}={v}" for k, v in sorted(report.alert_labels.items())))
    return lines


def render_body(report: Report, *, incident_version: int, updates: Sequence[str] = ()) -> str:
    lines = [f"Incident {report.incident_id} (version {incident_version})"
             f"{' on ' + report.service if report.service else ''}"
             f"{' in ' + report.environment if report.environment else ''}.", *_alert_lines(report), "", "## Facts"]
    lines += [f"- **{f.label}** {f.summary} ({f.source}{', partial' if f.partial else ''})" for f in report.facts]
    lines += ["", "## Hypotheses (not verified)"]
    lines += [f"- {h.statement} (confidence {h.confidence:.2f}; evidence {', '.join(h.evidence_labels)})"
              + (f"; {'; '.join(h.confirmed_by)}" if h.confirmed_by else "")
              + (f"; unverified: {'; '.join(h.unverified)}" if h.unverified else "") for h in report.hypotheses]
    if report.notes:
        lines += ["", "## Notes"] + [f"- {n}" for n in report.notes]
    if report.missing:
        lines += ["", "## Missing"] + [f"- {m.branch}: {m.reason}" for m in report.missing]
    if updates:
        lines += ["", "## Updates"] + [f"- {u}" for u in updates]
    return "\n".join(lines)
