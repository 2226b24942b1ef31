"""The replay comparison: field by field, drafts diffed, expectations listed when unmet."""

from __future__ import annotations

from ira.core.replay import (
    BranchExpectation,
    BranchOutcome,
    Expectations,
    Outcome,
    Volatile,
    compare,
    unmet_expectations,
)

ORIGINAL = Outcome(run_state="waiting", decisions=["create_run"],
                   branches={"metrics": BranchOutcome(stop_reason="done", evidence=["p95 rose"]),
                             "logs": BranchOutcome(stop_reason="done", hypotheses=["pool exhaustion"])},
                   hypotheses=["deploy v3", "pool"], draft_title="order-service slow", draft_body="a\nb\n",
                   budget_used={"tool_calls": 9}, duration_seconds=4.0)


def test_the_same_outcome_compares_equal_whatever_the_duration() -> None:
    comparison = compare(ORIGINAL, ORIGINAL.model_copy(update={"duration_seconds": 1.5}))
    assert comparison.differences == () and comparison.draft_diff == ()
    assert next(r for r in comparison.rows if r.aspect == "duration (s)").replay == "1.5"


def test_differences_name_the_aspect_and_the_draft_is_diffed() -> None:
    replay = ORIGINAL.model_copy(update={
        "branches": {**ORIGINAL.branches, "logs": BranchOutcome(stop_reason="error", error="tool errors: x")},
        "draft_body": "a\nc\n"})
    comparison = compare(ORIGINAL, replay)
    assert {r.aspect for r in comparison.differences} == {"branch logs", "draft body"}
    assert next(r for r in comparison.rows if r.aspect == "branch logs").replay == "error (tool errors: x)"
    assert "-b" in comparison.draft_diff and "+c" in comparison.draft_diff


def test_an_older_bundle_without_a_draft_is_shown_not_judged() -> None:
    original = Outcome(branches=ORIGINAL.branches)
    assert compare(original, ORIGINAL).differences == ()


def test_unmet_expectations_are_listed() -> None:
    expectations = Expectations(run_state="completed", ticket_draft_mentions=["order-service", "DB"],
                                branches={"metrics": BranchExpectation(stop_reason="done",
                                                                       evidence_contains=["p95 rose", "deploy"]),
                                          "runbooks": BranchExpectation(stop_reason="done")})
    assert unmet_expectations(expectations, ORIGINAL) == [
        "run: state waiting, expected completed", "metrics: no evidence mentions 'deploy'", "runbooks: no result",
        "draft: does not mention 'DB'"]


def test_times_ids_the_replays_labels_and_the_environment_are_not_differences() -> None:
    original = ORIGINAL.model_copy(update={
        "facts": ["p95 rose at 2026-11-29T11:32:00Z"],
        "draft_body": "Incident inc_01a23394b8144dd6d9c1e64edc2e5d87 on checkout in prod.\n"
                      "- labels: alertname=Slow, service=checkout\nsince 2026-11-29T11:31:00.5+00:00\n"})
    replay = original.model_copy(update={
        "facts": ["p95 rose at 2026-12-01T21:46:33Z"],
        "draft_body": "Incident inc_01a2339508c32c4f3821cf89a88c481d on checkout in staging.\n"
                      "- labels: alertname=Slow, environment=staging, ira_recording=sha256:" + "a" * 64 +
                      ", ira_replay=rpl_01a2339505af222401fe4adc769a0010, service=checkout\n"
                      "since 2026-12-01T21:45:00.25+00:00\n"})
    assert compare(original, replay, volatile=Volatile(environment="prod")).differences == ()
    changed = replay.model_copy(update={"draft_body": replay.draft_body.replace("checkout in", "payments in")})
    comparison = compare(original, changed, volatile=Volatile(environment="prod"))
    assert [r.aspect for r in comparison.differences] == ["draft body"]
    assert "+Incident <id> on payments in prod." in comparison.draft_diff
