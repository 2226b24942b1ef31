"""Pure decisions: branch acceptance, the join verdict, the contract's policy, the verifier."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from ira.coordinator.decide import BranchStatus, JoinVerdict, assess_branch, decide_join
from ira.coordinator.report import AcceptedBranch, compose_draft, compose_report
from ira.coordinator.verify import verify_run
from ira.coordinator.workflow import CONTRACT, PolicyAnswer, judge_action
from ira.core.investigation import BranchKind, BranchResult, Evidence, Hypothesis, StopReason
from ira.core.operation import Operation
from ira.core.report import MissingBranch
from ira.core.run import Step
from ira.core.states import OperationFact, StepState

T = datetime(2026, 4, 29, 11, 0, tzinfo=UTC)


def step(kind: str, state: StepState = StepState.DONE, *, required: bool = True) -> Step:
    return Step(tenant_id="acme", run_id="r", step_id=kind, kind=kind, state=state, required=required,
                binding={"tools": ["prometheus.query_range"] if kind == "metrics" else ["logs.search"]},
                result_ref="sha256:r", updated_at=T)


def result(kind: str, *, source: str = "prometheus.query_range", evidence: bool = True,
           stop: StopReason = StopReason.DONE) -> BranchResult:
    found = (Evidence(evidence_id="e1", source=source, summary="p99 up"),) if evidence else ()
    return BranchResult(branch=BranchKind(kind), stop_reason=stop, evidence=found,
                        hypotheses=(Hypothesis(statement="deploy", confidence=0.7, evidence_ids=("e1", "ghost")),))


@pytest.mark.parametrize(("given", "found", "status", "reason"), [
    (step("metrics"), result("metrics"), BranchStatus.ACCEPTED, "accepted"),
    (step("metrics"), result("metrics", stop=StopReason.BUDGET_EXHAUSTED), BranchStatus.ACCEPTED, "accepted"),
    (step("metrics", StepState.FAILED), None, BranchStatus.FAILED, "failed: no result"),
    (step("runbooks", StepState.FAILED, required=False), BranchResult(
        branch=BranchKind.RUNBOOKS, stop_reason=StopReason.DEADLINE), BranchStatus.MISSING, "failed: deadline"),
    (step("metrics"), None, BranchStatus.FAILED, "done without a readable result"),
    (step("metrics"), result("logs"), BranchStatus.FAILED, "result is for the logs branch"),
    (step("metrics"), result("metrics", evidence=False), BranchStatus.FAILED, "no evidence (done)"),
    (step("metrics"), result("metrics", source="kubectl.exec"), BranchStatus.FAILED,
     "evidence from tools outside the binding: kubectl.exec"),
])
def test_assess_branch(given: Step, found: BranchResult | None, status: BranchStatus, reason: str) -> None:
    outcome = assess_branch(given, found)
    assert (outcome.status, outcome.reason) == (status, reason)


def test_join_verdicts() -> None:
    ok, missing = assess_branch(step("metrics"), result("metrics")), assess_branch(
        step("runbooks", StepState.FAILED, required=False), None)
    failed = assess_branch(step("logs", StepState.FAILED), None)
    assert decide_join([ok, missing], on_required_failure="fail") == JoinVerdict.PROCEED
    assert decide_join([ok, failed], on_required_failure="human_review") == JoinVerdict.HUMAN_REVIEW
    assert decide_join([ok, failed], on_required_failure="fail") == JoinVerdict.FAIL


@pytest.mark.parametrize(("action", "answer"), [
    ("logs.search", PolicyAnswer.ALLOW), ("create_ticket", PolicyAnswer.ASK), ("restart", PolicyAnswer.DENY),
    ("rollback", PolicyAnswer.DENY), ("something.unlisted", PolicyAnswer.DENY)])
def test_the_contract_allows_reads_asks_for_tickets_blocks_remediation(action: str, answer: PolicyAnswer) -> None:
    assert judge_action(CONTRACT, action) == answer


def test_report_keeps_facts_apart_and_drops_uncited_evidence_ids() -> None:
    accepted = [AcceptedBranch(branch="metrics", result_ref="sha256:m", result=result("metrics"))]
    report = compose_report(run_id="r", bindings={"incident_id": "inc_1", "title": "latency", "severity": "high"},
                            accepted=accepted, missing=[MissingBranch(branch="runbooks", reason="timed out")])
    [h] = report.hypotheses
    assert [f.evidence_ref for f in report.facts] == ["sha256:m"]
    assert (h.evidence_ids, h.evidence_refs) == (("e1",), ("sha256:m",))
    assert h.unverified == ("runbooks branch missing: timed out",)
    draft = compose_draft(report, report_ref="sha256:rep", tenant_id="acme", incident_version=2)
    assert draft.request.title == "[high] latency" and "## Missing" in draft.request.body
    assert draft.evidence_refs == ("sha256:m",)


def _op(fact: OperationFact, ref: str | None = None) -> Operation:
    return Operation(operation_id="op", tenant_id="acme", run_id="r", step_id="create_ticket", kind="create_ticket",
                     idempotency_key="k", payload_hash="h", fact_state=fact, external_ref=ref, owner_epoch=1,
                     created_at=T, updated_at=T)


def test_the_verifier_needs_report_evidence_and_a_confirmed_ticket() -> None:
    accepted = [AcceptedBranch(branch="metrics", result_ref="sha256:m", result=result("metrics"))]
    report = compose_report(run_id="r", bindings={"incident_id": "i"}, missing=[], accepted=accepted)
    assert verify_run(contract=CONTRACT, report=report, ops=[_op(OperationFact.CONFIRMED_SUCCESS, "INC-1")]).passed
    assert not verify_run(contract=CONTRACT, report=None, ops=[_op(OperationFact.CONFIRMED_SUCCESS, "INC-1")]).passed
    assert not verify_run(contract=CONTRACT, report=report, ops=[]).passed
    doubt = verify_run(contract=CONTRACT, report=report, ops=[_op(OperationFact.UNKNOWN)])
    assert not doubt.passed and doubt.in_doubt == ("op",)


def test_a_report_without_evidence_passes_only_when_it_states_every_gap() -> None:
    # a run with no source configured drafts from the alert: nothing to cite, the gaps stated
    from ira.core.report import MissingBranch

    gaps = [MissingBranch(branch=b, reason="not planned: source not configured") for b in ("metrics", "logs")]
    stated = compose_report(run_id="r", bindings={"incident_id": "i"}, missing=gaps, accepted=[])
    silent = compose_report(run_id="r", bindings={"incident_id": "i"}, missing=[], accepted=[])
    ticket = [_op(OperationFact.CONFIRMED_SUCCESS, "INC-1")]
    assert verify_run(contract=CONTRACT, report=stated, ops=ticket).passed
    assert not verify_run(contract=CONTRACT, report=silent, ops=ticket).passed


def test_a_required_branch_with_no_source_configured_is_a_stated_gap_and_the_run_drafts() -> None:
    nothing = BranchResult(branch=BranchKind.LOGS, stop_reason=StopReason.ERROR, error="no evidence; tool errors: "
                           "not_configured", gap="no source is configured for logs.search")
    gap = assess_branch(step("logs", StepState.FAILED), nothing)
    assert (gap.status, gap.reason) == (BranchStatus.MISSING, "gap: no source is configured for logs.search")
    assert decide_join([gap], on_required_failure="fail") == JoinVerdict.PROCEED
    report = compose_report(run_id="r", bindings={"incident_id": "inc_1", "title": "checkout slow",
                                                  "severity": "high", "service": "checkout"},
                            accepted=[], missing=[MissingBranch(branch="logs", reason=gap.reason)])
    draft = compose_draft(report, report_ref="sha256:rep", tenant_id="acme", incident_version=1)
    assert draft.request.title == "[high] checkout: checkout slow"
    assert "- logs: gap: no source is configured for logs.search" in draft.request.body
