"""Runbooks rules: find runbooks for the alert, the service and its symptoms, and say which
apply to the version the service runs now (a v2 runbook is flagged when v3 runs).

A runbook's causes travel as evidence data, not as hypotheses: the coordinator's synthesis
promotes one only when a check of it is confirmed by the metrics or logs of this incident.

The running version comes from the binding's labels (``version``, the alert's label); with
none, applicability is reported as unverified rather than assumed.
"""

from __future__ import annotations

from collections.abc import Sequence

from ira.agents.model import BranchTask, Conclusion, ToolProposal, Turn
from ira.agents.policies.rules import evidence, observed
from ira.core.investigation import Evidence
from ira.core.signals import RunbookResult

SYMPTOM_LABELS = ("summary", "description", "symptoms")
"""Symptom text from the alert's annotations (the binding carries them) or, for older bindings, labels."""


def running_version(task: BranchTask) -> str | None:
    labels = task.binding.labels
    return labels.get("version") or labels.get("service_version")


def plan(task: BranchTask, history: Sequence[Turn] = ()) -> list[ToolProposal]:
    b = task.binding
    if b.service is None:
        return []
    text = {**b.labels, **b.annotations}
    symptoms = " ".join(text[k] for k in SYMPTOM_LABELS if text.get(k)) or None
    args = {"service": b.service, "alert": b.alert_name, "text": symptoms[:300] if symptoms else None,
            "version": running_version(task), "limit": 5}
    return [ToolProposal(tool="runbooks.search", args=args, rationale="search")]


def analyze(task: BranchTask, history: Sequence[Turn]) -> Conclusion:
    found = observed(history, "runbooks.search")
    if not found:
        return Conclusion()
    turn, obs = found[-1]
    result = RunbookResult.model_validate(obs.data)
    version = result.query.version
    items: list[Evidence] = []
    for index, hit in enumerate(result.hits, start=1):
        book = hit.runbook
        matched = "alert and service" if result.query.alert in book.alerts else "service and symptoms"
        span = f"versions {book.versions}" if book.versions else "any version"
        if hit.applies is None:
            verdict = "applicability to the running version is unverified (version unknown)"
        elif hit.applies:
            verdict = f"applies to the running {version}"
        else:
            verdict = f"FLAGGED: written for {span}, does not apply to the running {version}"
        summary = f'runbook "{book.title}" ({book.path}, {span}) matches {matched}; {verdict}'
        items.append(evidence(task, (turn, obs), summary, index=index, data={
            "runbook_id": book.runbook_id, "path": book.path, "versions": book.versions, "applies": hit.applies,
            "flagged": hit.applies is False, "score": hit.score, "causes": list(book.causes)}))
    return Conclusion(evidence=tuple(items))
