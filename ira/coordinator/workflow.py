"""The plan of ``incident-diagnosis@1`` and how a decision becomes a new run (C1).

::

    metrics (required) ─┐
    logs    (required) ─┼─> join ─> synthesize ─> approve_ticket ─> create_ticket ─> complete
    runbooks(optional) ─┘

A branch is planned only when its data source is configured (``WorkflowConfig.sources``); one
that is not is a stated gap (``BRANCH_NOT_PLANNED``, listed under the report's missing
branches), required-ness applies to planned branches only, and a run with no branch at all
goes from the join straight on to a draft made from the alert.

Pure: ``plan_run`` turns a decision into the rows C1 writes; ``intake`` writes them in one
transaction. The contract travels with the run, so later checks (policy, verifier) read what
was bound at acceptance, not whatever the code says today.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any

from ira.coordinator.config import WorkflowConfig
from ira.core.budget import BudgetDimension
from ira.core.commit import EventDraft, NewRun, NewStep
from ira.core.decision import IncidentDecision
from ira.core.events import RunEventType
from ira.core.ids import new_id
from ira.core.investigation import BranchBinding, BranchKind
from ira.core.redact import Redactor
from ira.core.replay import RECORDING_LABEL, STAGING, run_targets
from ira.core.run import Step
from ira.core.states import StepState
from ira.runtime.store.timers import Timer
from ira.runtime.wakeup import step_wakeup

WORKFLOW = "incident-diagnosis@1"
TASK_KIND = "diagnose_incident"
JOIN, SYNTHESIZE, APPROVE_TICKET, CREATE_TICKET, COMPLETE = (
    "join", "synthesize", "approve_ticket", "create_ticket", "complete")
COORDINATOR_KINDS = (JOIN, SYNTHESIZE, APPROVE_TICKET, CREATE_TICKET, COMPLETE)
CREATE_TICKET_ACTION = "create_ticket"
BRANCH_DEADLINE_TIMER = "branch_deadline"

BRANCH_TOOLS: Mapping[BranchKind, tuple[str, ...]] = {
    BranchKind.METRICS: ("prometheus.query_range", "prometheus.query", "deployments.list"),
    BranchKind.LOGS: ("logs.search",),
    BranchKind.RUNBOOKS: ("runbooks.search",),
}
REQUIRED_BRANCHES = frozenset({BranchKind.METRICS, BranchKind.LOGS})
BRANCH_KINDS = frozenset(k.value for k in BranchKind)

CONTRACT: Mapping[str, Any] = {
    "allowed": sorted({tool for tools in BRANCH_TOOLS.values() for tool in tools}),
    "approval_required": [CREATE_TICKET_ACTION],
    "blocked": ["restart", "rollback", "scale", "delete", "deploy", "remediate"],
    "required_branches": sorted(REQUIRED_BRANCHES),
    "optional_branches": sorted(set(BranchKind) - REQUIRED_BRANCHES),
    "required_operations": [CREATE_TICKET_ACTION],
}
"""Read-only tools allowed; the ticket needs approval; remediation is always blocked."""


class PolicyAnswer(StrEnum):
    ALLOW = "allow"
    ASK = "ask"
    DENY = "deny"


def judge_action(contract: Mapping[str, Any], action: str) -> PolicyAnswer:
    """What the run's contract says about ``action``; anything unlisted is denied."""
    if action in contract.get("blocked", ()):
        return PolicyAnswer.DENY
    if action in contract.get("approval_required", ()):
        return PolicyAnswer.ASK
    return PolicyAnswer.ALLOW if action in contract.get("allowed", ()) else PolicyAnswer.DENY


@dataclass(frozen=True)
class RunPlan:
    """Everything C1 writes besides the run itself: budget and the branch deadline timer."""

    new_run: NewRun
    root_budget: Mapping[BudgetDimension, int]
    slices: Mapping[str, Mapping[BudgetDimension, int]]
    deadline: Timer


NOT_CONFIGURED = "source not configured"


def planned_branches(config: WorkflowConfig, decision: IncidentDecision | None = None) -> tuple[BranchKind, ...]:
    """The branches a run gets: those whose data source is configured, in plan order. A staging
    replay's run gets every branch: its recording answers them, whatever this process has configured."""
    if decision is not None and decision.environment == STAGING and RECORDING_LABEL in decision.alert.labels:
        return tuple(BranchKind)
    return tuple(k for k in BranchKind if k.value in config.sources)


def run_contract(planned: tuple[BranchKind, ...]) -> dict[str, Any]:
    """The contract, its required/optional branches narrowed to what was planned."""
    required = [k.value for k in planned if k in REQUIRED_BRANCHES]
    return {**CONTRACT, "required_branches": required,
            "optional_branches": [k.value for k in planned if k not in REQUIRED_BRANCHES]}


def plan_run(decision: IncidentDecision, config: WorkflowConfig, *, now: datetime) -> RunPlan:
    """The run for a ``create_run`` decision: steps, bindings, contract, wake-ups, budget."""
    decision = redacted(decision, config.redactor)
    run_id = new_id("run")
    deadline = now + config.branch_deadline
    planned = planned_branches(config, decision)
    not_planned = {k.value: NOT_CONFIGURED for k in BranchKind if k not in planned}
    steps = (*(_branch_step(decision, kind, config, now=now) for kind in planned), *_coordinator_steps(planned))
    wakeups = tuple(step_wakeup(decision.tenant_id, run_id, s.step_id, kind=s.kind, environment=config.environment,
                                at=now) for s in steps if s.state == StepState.READY)
    gaps = tuple(EventDraft(type=RunEventType.BRANCH_NOT_PLANNED, data={
        "branch": branch, "reason": reason, "required": BranchKind(branch) in REQUIRED_BRANCHES})
        for branch, reason in not_planned.items())
    new_run = NewRun(
        tenant_id=decision.tenant_id, run_id=run_id, task_id=new_id("task"), task_kind=TASK_KIND,
        subject_ref=f"incident:{decision.incident_id}", workflow=WORKFLOW,
        environment=run_environment(decision, config), incident_id=decision.incident_id, contract=run_contract(planned),
        bindings={**run_bindings(decision, now=now), "not_planned": not_planned,
                  "targets": run_targets(run_environment(decision, config), notifications=config.notification_channel)},
        steps=steps, outbox=wakeups, idempotency_key=decision.evaluation_id,
        events=(EventDraft(type=RunEventType.RUN_CREATED, data={
            "incident_id": decision.incident_id, "evaluation_id": decision.evaluation_id, "workflow": WORKFLOW,
            "incident_version": decision.incident_version, "branches": [k.value for k in planned]}), *gaps),
    )
    timer = Timer(tenant_id=decision.tenant_id, timer_id=f"deadline:{run_id}", kind=BRANCH_DEADLINE_TIMER,
                  due_at=deadline, run_id=run_id)
    return RunPlan(new_run=new_run, root_budget=dict(config.root_budget), deadline=timer,
                   slices={kind.value: dict(config.branch_budget) for kind in planned})


def redacted(decision: IncidentDecision, redactor: Redactor) -> IncidentDecision:
    """The decision with the alert's free text masked: the title, labels, annotations and link
    reach bindings, events, model prompts, drafts and Slack, so secrets stop here (once per
    run, not per alert on the ingest path)."""
    alert = decision.alert
    clean = alert.model_copy(update={
        "labels": redactor.value(alert.labels), "annotations": redactor.value(alert.annotations),
        "generator_url": redactor.text(alert.generator_url) if alert.generator_url else None})
    return decision.model_copy(update={"title": redactor.text(decision.title), "alert": clean})


def run_environment(decision: IncidentDecision, config: WorkflowConfig) -> str:
    """A staging alert (a replay's) makes a staging run even in production's process: its runs are
    marked, listed apart and bound to sandboxes only. Any other label leaves the process's environment."""
    return STAGING if decision.environment == STAGING else config.environment


def run_bindings(decision: IncidentDecision, *, now: datetime) -> dict[str, Any]:
    """What the run was accepted for: the incident as of this decision."""
    return {
        "incident_id": decision.incident_id, "incident_version": decision.incident_version,
        "evaluation_id": decision.evaluation_id, "service": decision.service,
        "environment": decision.environment, "severity": decision.severity, "title": decision.title,
        "alert_name": decision.alert.name, "alert_started_at": decision.alert.starts_at.isoformat(),
        "alert_labels": dict(decision.alert.labels), "alert_annotations": dict(decision.alert.annotations),
        "group_key": decision.group_key, "accepted_at": now.isoformat(),
    }


def _branch_step(decision: IncidentDecision, kind: BranchKind, config: WorkflowConfig, *, now: datetime) -> NewStep:
    alert = decision.alert
    window_start = alert.starts_at - config.window_before
    binding = BranchBinding(
        tenant_id=decision.tenant_id, environment=decision.environment or config.environment,
        service=decision.service, incident_id=decision.incident_id, alert_name=alert.name,
        window_start=window_start, window_end=now,
        tools=BRANCH_TOOLS[kind], budget=dict(config.branch_budget), deadline=now + config.branch_deadline,
        may_delegate=False, labels=dict(alert.labels), alert_started_at=alert.starts_at,
        annotations=dict(alert.annotations), runbook_url=alert.annotations.get("runbook_url") or None,
        changes_since=min(window_start, now - config.change_lookback),
        dependencies=declared_dependencies(decision, config),
    )
    return NewStep(step_id=kind.value, kind=kind.value, state=StepState.READY, required=kind in REQUIRED_BRANCHES,
                   binding=binding.model_dump(mode="json"))


MAX_DEPENDENCIES = 3
_SERVICE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}$")


def declared_dependencies(decision: IncidentDecision, config: WorkflowConfig) -> tuple[str, ...]:
    """The service catalog's dependencies of the service, then the alert's ``depends_on`` annotation;
    well-formed names only, at most ``MAX_DEPENDENCIES``, never the service itself."""
    service = decision.service
    named = [*config.dependencies.get(service or "", ()),
             *(d.strip() for d in decision.alert.annotations.get("depends_on", "").split(","))]
    found = [d for d in dict.fromkeys(named) if d and d != service and _SERVICE_NAME.match(d)]
    return tuple(found[:MAX_DEPENDENCIES]) if service else ()


def _coordinator_steps(planned: tuple[BranchKind, ...]) -> tuple[NewStep, ...]:
    """The coordinator's chain; the join waits for the planned branches (ready at once if none)."""
    chain = [(JOIN, tuple(k.value for k in planned)), (SYNTHESIZE, (JOIN,)), (APPROVE_TICKET, (SYNTHESIZE,)),
             (CREATE_TICKET, (APPROVE_TICKET,)), (COMPLETE, (CREATE_TICKET,))]
    return tuple(NewStep(step_id=step_id, kind=step_id, state=StepState.BLOCKED if deps else StepState.READY,
                         depends_on=deps) for step_id, deps in chain)


RETRY_MARK = "~"
"""A retried branch's step id is ``<kind>~<attempt>`` (``metrics~2``); the first attempt is ``<kind>``."""


def attempt_of(step_id: str) -> int:
    """1 for a planned branch step, n for its (n-1)th retry."""
    _, mark, attempt = step_id.partition(RETRY_MARK)
    return int(attempt) if mark and attempt.isascii() and attempt.isdigit() else 1


def retry_step_id(kind: str, attempt: int) -> str:
    return f"{kind}{RETRY_MARK}{attempt}"


def latest_attempts(plan: Iterable[Step]) -> list[Step]:
    """Each branch's latest attempt, in kind order: a retry supersedes the attempt it repeats
    (the earlier one stays in the plan, FAILED, as history)."""
    latest: dict[str, Step] = {}
    for step in plan:
        if step.kind in BRANCH_KINDS and (step.kind not in latest
                                           or attempt_of(step.step_id) > attempt_of(latest[step.kind].step_id)):
            latest[step.kind] = step
    return [latest[kind] for kind in sorted(latest)]
