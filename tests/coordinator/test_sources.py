"""Branches are planned only for configured data sources; a missing source is a stated gap,
and a run with no runnable branch still drafts the ticket from the alert and asks for approval."""

from __future__ import annotations

from types import SimpleNamespace

from ira.coordinator import records
from ira.coordinator.config import WorkflowConfig
from ira.coordinator.workflow import JOIN, NOT_CONFIGURED, plan_run
from ira.core.report import TicketDraft
from ira.core.states import RunState, StepState, WaitKind
from ira.dashboard.templating import render_page
from ira.readmodel import detail, events, reports
from ira.runtime.settings import Settings
from ira.runtime.store import runs, steps
from ira.runtime.store.artifacts import get_artifact
from ira.runtime.store.database import Database
from tests.coordinator.harness import T0, api, auth, build, decision, envelope, run_for_incident


def with_annotations():  # type: ignore[no-untyped-def]
    d = decision()
    return d.model_copy(update={"alert": d.alert.model_copy(update={"annotations": {
        "summary": "p99 above 2s for 5m", "description": "checkout is slow",
        "runbook_url": "https://runbooks.example/order-latency"}})})


def test_only_configured_sources_are_planned_and_the_others_are_stated() -> None:
    plan = plan_run(decision(), WorkflowConfig(sources=frozenset({"logs"})), now=T0)
    by_id = {s.step_id: s for s in plan.new_run.steps}
    assert "metrics" not in by_id and "runbooks" not in by_id
    assert by_id["logs"].required and by_id[JOIN].depends_on == ("logs",)
    gaps = [e.data for e in plan.new_run.events if e.type == "BRANCH_NOT_PLANNED"]
    assert gaps == [{"branch": "metrics", "reason": NOT_CONFIGURED, "required": True},
                    {"branch": "runbooks", "reason": NOT_CONFIGURED, "required": False}]
    assert plan.new_run.contract["required_branches"] == ["logs"] and set(plan.slices) == {"logs"}


def test_with_nothing_configured_the_join_is_ready_at_once() -> None:
    plan = plan_run(decision(), WorkflowConfig(sources=frozenset()), now=T0)
    join = next(s for s in plan.new_run.steps if s.step_id == JOIN)
    assert (join.state, join.depends_on) == (StepState.READY, ())
    assert len(plan.new_run.outbox) == 1 and plan.new_run.contract["required_branches"] == []
    assert not [s for s in plan.new_run.steps if s.binding]


def test_configured_sources_come_from_the_agents_settings() -> None:
    def sources(agents: dict[str, object]) -> frozenset[str]:
        settings = Settings.model_validate({"database_url": "sqlite:///unused.db", "agents": agents})
        return WorkflowConfig.from_settings(settings).sources

    assert sources({}) == frozenset()
    assert sources({"jsonl_logs": {"paths": "/var/log/x/*.jsonl"}}) == {"logs"}
    assert sources({"prometheus": {"url": "http://127.0.0.1:9090"}, "runbooks_dir": "/tmp"}) == {"metrics", "runbooks"}
    assert sources({"recorded_bundle": "/tmp/bundle"}) == {"metrics", "logs", "runbooks"}


async def _run_page(db: Database, run_id: str) -> str:
    """The dashboard's run page, rendered as its route does."""
    async with db.reader() as conn:
        run = await detail.run_detail(conn, "acme", run_id)
        log = await events.list_events(conn, "acme", run_id)
        report = await reports.report_view(conn, "acme", run_id)
        draft = await reports.draft_view(conn, "acme", run_id)
    page = render_page("run.html", viewer=SimpleNamespace(name="viewer", tenant_id="acme"), run=run,
                       events=log.events, report=report, draft=draft, may_decide=False, csrf="x", asks=0, nav="runs")
    return bytes(page.body).decode()


async def _draft(db: Database, run_id: str) -> TicketDraft:
    async with db.reader() as conn:
        current = await records.current_draft(conn, "acme", run_id)
        assert current is not None
        return TicketDraft.model_validate_json((await get_artifact(conn, "acme", current.ref))[1])


async def test_only_logs_configured_runs_no_metrics_step_and_the_draft_states_the_gap(db: Database) -> None:
    pump, deps = build(db, sources=frozenset({"logs"}))
    d = decision()
    await pump.decide(envelope(d))
    await pump.drain()
    run = await run_for_incident(db, d.incident_id)
    assert run is not None
    async with db.reader() as conn:
        plan = {s.step_id: s.state for s in await steps.list_steps(conn, "acme", run.run_id)}
        log = await runs.list_events(conn, "acme", run.run_id)
    async with api(deps) as client:
        report = (await client.get(f"/v1/runs/{run.run_id}/report", headers=auth("viewer"))).json()
        page = (await client.get(f"/v1/runs/{run.run_id}", headers=auth("viewer")))
    html = await _run_page(db, run.run_id)
    await pump.close()
    draft = await _draft(db, run.run_id)
    assert (run.state, run.wait_kind) == (RunState.WAITING, WaitKind.APPROVAL)
    assert "Branch metrics not planned: source not configured." in html
    assert html.count('<div class="name">join') == 1
    assert "metrics" not in plan and plan["logs"] == StepState.DONE
    assert [e.data["branch"] for e in log if e.type == "BRANCH_NOT_PLANNED"] == ["metrics", "runbooks"]
    assert "- metrics: source not configured" in draft.request.body
    assert {m["branch"]: m["reason"] for m in report["missing"]} == {"metrics": NOT_CONFIGURED,
                                                                      "runbooks": NOT_CONFIGURED}
    assert {b["branch"]: b["status"] for b in report["branches"]} == {
        "logs": "accepted", "metrics": "not_planned", "runbooks": "not_planned"}
    assert page.status_code == 200 and "metrics" not in {s["step_id"] for s in page.json()["steps"]}


async def test_nothing_configured_drafts_from_the_alert_and_asks_for_approval(db: Database) -> None:
    pump, deps = build(db, sources=frozenset())
    d = with_annotations()
    await pump.decide(envelope(d))
    await pump.drain()
    run = await run_for_incident(db, d.incident_id)
    assert run is not None
    async with db.reader() as conn:
        approvals = await records.list_approvals(conn, "acme", run.run_id)
        log = [e.type for e in await runs.list_events(conn, "acme", run.run_id)]
    async with api(deps) as client:
        events = (await client.get(f"/v1/runs/{run.run_id}/events", headers=auth("viewer"))).json()["events"]
        html = await _run_page(db, run.run_id)
        draft = await _draft(db, run.run_id)
        # approved, the ticket is filed and the run completes: a draft that states every gap needs no evidence
        decided = await client.post(f"/v1/approvals/{approvals[0].approval_id}/decision", headers=auth("lead"),
                                    json={"decision": "approve"})
        await pump.drain()
    await pump.close()
    done = await run_for_incident(db, d.incident_id)
    assert decided.status_code == 200, decided.text
    assert done is not None and (done.state, done.outcome) == (RunState.COMPLETED, "ticket_created")
    body = draft.request.body
    assert html.count('<div class="name">join') == 1 and "no data source configured" in html
    assert (run.state, run.wait_kind) == (RunState.WAITING, WaitKind.APPROVAL)
    assert [a.state for a in approvals] == ["pending"]
    assert log.count("BRANCH_NOT_PLANNED") == 3 and "AGENT_TURN" not in log and "REPORT_WRITTEN" in log
    assert draft.request.title == "[critical] order-service: order-service p99 latency above 2s"
    assert "no data source configured" in body
    assert "summary: p99 above 2s for 5m" in body and "description: checkout is slow" in body
    assert "runbook_url: https://runbooks.example/order-latency" in body
    assert "labels: env=prod, service=order-service" in body
    assert "Investigation started with no branch" in {e["type"]: e["text"] for e in events}["RUN_STARTED"]
