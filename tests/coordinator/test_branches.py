"""Branches and the join: failures, deadlines, the binding, and results that must not count twice."""

from __future__ import annotations

from datetime import timedelta

import pytest

from ira.coordinator import records
from ira.core.budget import BudgetDimension
from ira.core.clock import FrozenClock
from ira.core.errors import BudgetExhaustedError
from ira.core.report import Report, TicketDraft
from ira.core.run import Run
from ira.core.states import RunState, StepState, WaitKind
from ira.runtime.scanner import Scanner
from ira.runtime.store import budget, runs, steps
from ira.runtime.store.artifacts import get_artifact
from ira.runtime.store.database import Database
from ira.runtime.wakeup import step_wakeup
from tests.coordinator.harness import T0, Pump, api, auth, build, decision, envelope, run_for_incident
from tests.eventually import eventually


async def started(db: Database, **kw: object) -> tuple[Pump, Run, FrozenClock]:
    clock = FrozenClock(T0)
    pump, _ = build(db, clock=clock, **kw)  # type: ignore[arg-type]
    d = decision()
    await pump.decide(envelope(d))
    await pump.drain()
    run = await run_for_incident(db, d.incident_id)
    assert run is not None
    return pump, run, clock


async def current(db: Database, run_id: str) -> tuple[Run, dict[str, StepState], list[str]]:
    async with db.reader() as conn:
        run = await runs.get_run(conn, "acme", run_id)
        plan = {s.step_id: s.state for s in await steps.list_steps(conn, "acme", run_id)}
        log = [e.type for e in await runs.list_events(conn, "acme", run_id)]
    return run, plan, log


async def test_required_branch_failure_waits_for_a_person(db: Database) -> None:
    pump, run, _ = await started(db, behaviour={"logs": "fail"})
    run, plan, log = await current(db, run.run_id)
    async with db.reader() as conn:
        items = await records.list_work_items(conn, "acme", run.run_id)
    await pump.close()
    assert (run.state, run.wait_kind, plan["join"]) == (RunState.WAITING, WaitKind.HUMAN_REVIEW, StepState.WAITING)
    assert [(i.kind, i.state) for i in items] == [("human_review", "open")]
    assert "BRANCH_FAILED" in log and "REPORT_WRITTEN" not in log


async def test_a_person_drafts_anyway_and_the_draft_states_the_gap(db: Database) -> None:
    # Given a run waiting for a review because its required logs branch failed
    pump, run, _ = await started(db, behaviour={"logs": "fail"})
    async with db.reader() as conn:
        [item] = await records.list_work_items(conn, "acme", run.run_id)
    async with api(pump.deps) as client:
        path = f"/v1/work-items/{item.work_item_id}/draft-anyway"
        # When a viewer tries, nothing happens; when an approver chooses to draft anyway, it drafts
        refused = await client.post(path, headers=auth("viewer"), json={"note": "ship it"})
        chosen = await client.post(path, headers=auth("lead"), json={"note": "logs are down; metrics are clear"})
        await pump.drain()
        again = await client.post(path, headers=auth("lead"), json={})
        draft = (await client.get(f"/v1/runs/{run.run_id}/draft", headers=auth("viewer"))).json()
        events = (await client.get(f"/v1/runs/{run.run_id}/events", headers=auth("viewer"))).json()["events"]
    run, plan, log = await current(db, run.run_id)
    await pump.close()
    assert refused.status_code == 403 and chosen.status_code == 200, chosen.text
    assert again.status_code == 400  # the review is closed: a second click changes nothing
    # Then the run waits for approval of a draft that says which evidence is missing
    assert (run.state, run.wait_kind, plan["join"]) == (RunState.WAITING, WaitKind.APPROVAL, StepState.DONE)
    assert "## Missing" in draft["body"] and "- logs:" in draft["body"]
    assert log.index("REVIEW_DRAFT_ANYWAY") < log.index("REPORT_WRITTEN")
    [said] = [e["text"] for e in events if e["type"] == "REVIEW_DRAFT_ANYWAY"]
    assert said == "lead chose to draft anyway, the gaps stated: “logs are down; metrics are clear”."


async def test_a_person_retries_the_failed_branch_and_the_run_goes_on(db: Database) -> None:
    # Given a run waiting for a review because its required logs branch failed
    pump, run, _ = await started(db, behaviour={"logs": "fail"})
    async with db.reader() as conn:
        [item] = await records.list_work_items(conn, "acme", run.run_id)
    async with api(pump.deps) as client:
        path = f"/v1/work-items/{item.work_item_id}/retry"
        # When a viewer tries, nothing happens; when the logs source is back and an approver retries
        refused = await client.post(path, headers=auth("viewer"), json={})
        pump.scripted.behaviour = {}
        chosen = await client.post(path, headers=auth("lead"), json={"note": "Loki is back"})
        await pump.drain()
        again = await client.post(path, headers=auth("lead"), json={})
        detail = (await client.get(f"/v1/runs/{run.run_id}", headers=auth("viewer"))).json()
        events = (await client.get(f"/v1/runs/{run.run_id}/events", headers=auth("viewer"))).json()["events"]
    run, plan, log = await current(db, run.run_id)
    async with db.reader() as conn:
        draft = await records.current_draft(conn, "acme", run.run_id)
        doc = TicketDraft.model_validate_json((await get_artifact(conn, "acme", draft.ref))[1])
        retry_slice = await budget.list_balances(conn, "acme", run.run_id, scope="logs~2")
    await pump.close()
    assert refused.status_code == 403 and chosen.status_code == 200, chosen.text
    assert chosen.json()["state"] == "running"
    assert again.status_code == 400  # the review is closed
    # Then the failed attempt stays as history, the new attempt ran in its own slice, and the
    # join judged the branch by its latest attempt: the run waits for approval of a full draft
    assert (plan["logs"], plan["logs~2"], plan["join"]) == (StepState.FAILED, StepState.DONE, StepState.DONE)
    assert (run.state, run.wait_kind) == (RunState.WAITING, WaitKind.APPROVAL)
    assert retry_slice, "the retry draws from a slice of its own"
    assert "## Missing" not in doc.request.body
    assert log.index("REVIEW_RETRY_BRANCHES") < log.index("JOINED", log.index("REVIEW_RETRY_BRANCHES"))
    [said] = [e["text"] for e in events if e["type"] == "REVIEW_RETRY_BRANCHES"]
    assert said == "lead retried the failed branches (logs): “Loki is back”."
    assert "logs~2" in {s["step_id"] for s in detail["steps"]}


async def test_a_retried_branch_that_fails_again_asks_again(db: Database) -> None:
    pump, run, _ = await started(db, behaviour={"metrics": "fail"})
    for attempt in (2, 3):
        async with db.reader() as conn:
            [item] = [i for i in await records.list_work_items(conn, "acme", run.run_id) if i.state == "open"]
        async with api(pump.deps) as client:
            answer = await client.post(f"/v1/work-items/{item.work_item_id}/retry", headers=auth("lead"), json={})
        await pump.drain()
        assert answer.status_code == 200, answer.text
        run, plan, _ = await current(db, run.run_id)
        assert (run.state, run.wait_kind) == (RunState.WAITING, WaitKind.HUMAN_REVIEW)
        assert plan[f"metrics~{attempt}"] == StepState.FAILED and plan["join"] == StepState.WAITING
    await pump.close()


async def test_required_branch_failure_fails_the_run_when_configured(db: Database) -> None:
    pump, run, _ = await started(db, behaviour={"metrics": "fail"}, on_required_failure="fail")
    run, plan, _ = await current(db, run.run_id)
    await pump.close()
    assert (run.state, run.outcome, plan["join"]) == (RunState.FAILED, "required_branch_failed", StepState.FAILED)
    assert plan["synthesize"] == StepState.SKIPPED


async def test_optional_branch_past_its_deadline_is_reported_missing(db: Database) -> None:
    pump, run, clock = await started(db, behaviour={"runbooks": "hang"}, lease=0.3)
    _, plan, _ = await current(db, run.run_id)
    assert plan["runbooks"] == StepState.RUNNING and plan["join"] == StepState.BLOCKED
    clock.advance(pump.deps.config.branch_deadline + timedelta(seconds=1))
    await Scanner(db=db, clock=clock, environment="prod").scan_once()  # fires the durable deadline timer
    await pump.drain()
    await eventually(lambda: not pump.scripted.hanging, timeout=10, message="hung branch cancelled")
    run, plan, log = await current(db, run.run_id)
    async with db.reader() as conn:
        draft = await records.current_draft(conn, "acme", run.run_id)
        synth = await steps.get_step(conn, "acme", run.run_id, "synthesize")
        report = Report.model_validate_json((await get_artifact(conn, "acme", synth.result_ref))[1])
        doc = TicketDraft.model_validate_json((await get_artifact(conn, "acme", draft.ref))[1])
    await pump.close()
    assert (run.state, run.wait_kind, plan["runbooks"]) == (RunState.WAITING, WaitKind.APPROVAL, StepState.FAILED)
    assert "BRANCH_TIMED_OUT" in log and "BRANCH_MISSING" in log
    assert [m.branch for m in report.missing] == ["runbooks"] and "deadline" in report.missing[0].reason
    assert {f.branch for f in report.facts} == {"metrics", "logs"}
    assert all(h.evidence_refs and "runbooks branch missing" in h.unverified[-1] for h in report.hypotheses)
    assert "## Missing" in doc.request.body and draft.ref.startswith("sha256:")


async def test_required_branch_past_its_deadline_counts_as_failed(db: Database) -> None:
    pump, run, clock = await started(db, behaviour={"metrics": "hang"}, lease=0.3)
    clock.advance(pump.deps.config.branch_deadline + timedelta(seconds=1))
    await Scanner(db=db, clock=clock, environment="prod").scan_once()
    await pump.drain()
    await eventually(lambda: not pump.scripted.hanging, timeout=10, message="hung branch cancelled")
    run, _, log = await current(db, run.run_id)
    await pump.close()
    assert (run.state, run.wait_kind) == (RunState.WAITING, WaitKind.HUMAN_REVIEW) and "BRANCH_FAILED" in log


async def test_a_tool_outside_the_binding_is_denied_and_recorded(db: Database) -> None:
    pump, run, _ = await started(db, behaviour={"logs": "deny"})
    run, _, log = await current(db, run.run_id)
    async with db.reader() as conn:
        denied = [e.data for e in await runs.list_events(conn, "acme", run.run_id) if e.type == "PROPOSAL_DENIED"]
    await pump.close()
    assert [(d["step_id"], d["tool"]) for d in denied] == [("logs", "kubectl.rollout_restart")]
    assert run.wait_kind == WaitKind.APPROVAL  # the branch went on within its binding


async def test_evidence_from_outside_the_binding_is_not_accepted(db: Database) -> None:
    pump, run, _ = await started(db, behaviour={"metrics": "outside"})
    run, _, _ = await current(db, run.run_id)
    async with db.reader() as conn:
        failed = [e.data for e in await runs.list_events(conn, "acme", run.run_id) if e.type == "BRANCH_FAILED"]
    await pump.close()
    assert run.wait_kind == WaitKind.HUMAN_REVIEW
    assert failed[0]["branch"] == "metrics" and "outside the binding" in failed[0]["reason"]


async def test_early_duplicate_and_late_results_never_advance_the_join_twice(db: Database) -> None:
    pump, run, clock = await started(db, behaviour={"runbooks": "hang"}, lease=0.3)
    coordinator, agents = pump.dispatchers

    def wake(step_id: str):  # type: ignore[no-untyped-def]
        return step_wakeup("acme", run.run_id, step_id, kind=step_id, environment="prod", at=T0).envelope

    await coordinator.handle_wakeup(wake("join"))  # early: the join is still BLOCKED
    assert "JOINED" not in (await current(db, run.run_id))[2]
    async with db.reader() as conn:
        hung_epoch = (await steps.get_step(conn, "acme", run.run_id, "runbooks")).owner_epoch
    clock.advance(pump.deps.config.branch_deadline + timedelta(seconds=1))
    await Scanner(db=db, clock=clock, environment="prod").scan_once()
    await pump.drain()
    for _ in range(3):  # duplicated wake-ups of finished coordinator steps
        await coordinator.handle_wakeup(wake("join"))
        await coordinator.handle_wakeup(wake("synthesize"))
    await agents.handle_wakeup(wake("runbooks"))  # a late re-delivery of the timed-out branch
    pump.scripted.release.set()  # the hung investigator wakes up and tries to commit its result
    await eventually(lambda: not pump.scripted.hanging, timeout=10, message="hung branch gone")
    _, _, log = await current(db, run.run_id)
    await pump.close()
    assert (log.count("JOINED"), log.count("REPORT_WRITTEN"), log.count("DRAFT_WRITTEN")) == (1, 1, 1)
    assert ("runbooks", hung_epoch) not in pump.scripted.finished


async def test_an_exhausted_root_budget_ends_the_run(db: Database) -> None:
    pump, run, _ = await started(db, root_budget={BudgetDimension.STEPS: 5, BudgetDimension.TOOL_CALLS: 40},
                                 branch_budget={BudgetDimension.STEPS: 1, BudgetDimension.TOOL_CALLS: 5})
    run, plan, log = await current(db, run.run_id)
    await pump.close()
    assert (run.state, run.outcome) == (RunState.FAILED, "budget_exhausted")
    assert plan["synthesize"] == StepState.DONE and plan["approve_ticket"] == StepState.SKIPPED
    assert "APPROVAL_REQUESTED" not in log


async def test_a_branch_cannot_spend_past_its_slice_or_touch_the_root(db: Database) -> None:
    pump, run, _ = await started(db, behaviour={"metrics": "hang"}, lease=0.3)
    async with db.reader() as conn:
        root_before = await budget.list_balances(conn, "acme", run.run_id)
    with pytest.raises(BudgetExhaustedError):
        async with db.transaction() as conn:  # the slice holds 5 tool calls; none used yet (the branch hangs)
            await budget.reserve(conn, "acme", run.run_id, BudgetDimension.TOOL_CALLS, 6, reservation_id="greedy",
                                 scope="metrics", at=T0)
    async with db.reader() as conn:
        root_after = await budget.list_balances(conn, "acme", run.run_id)
        [slice_calls] = [b for b in await budget.list_balances(conn, "acme", run.run_id, scope="metrics")
                         if b.dimension == BudgetDimension.TOOL_CALLS]
    await pump.close()
    assert root_after == root_before and (slice_calls.limit, slice_calls.reserved) == (5, 0)
