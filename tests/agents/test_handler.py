"""The branch handler end to end, as the coordinator will drive it: a run with branch steps and
budget slices, wake-ups through the step dispatcher, results committed with the join promoted."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path

from sqlalchemy import insert, select

from ira.agents.handler import FINISHED_EVENT
from ira.agents.main import build_handlers
from ira.agents.model import BranchTask
from ira.agents.policies.rules_metrics import planner
from ira.connectors.bound import ConnectorSet
from ira.connectors.deployments import SqlChangeSource
from ira.connectors.logs.jsonl import JsonlLogSource
from ira.connectors.recorded import BundleInfo, Recording, query_key, recorded_connectors
from ira.connectors.runbooks import FileRunbookSource
from ira.core.budget import BudgetDimension as Dim
from ira.core.clock import FrozenClock
from ira.core.ids import new_id
from ira.core.investigation import BranchKind, BranchResult, StopReason
from ira.core.signals import MetricResult, MetricSeries
from ira.core.states import StepState
from ira.runtime.dispatch import StepDispatcher
from ira.runtime.settings import load_settings
from ira.runtime.settings.agents import AgentsSettings, MetricsBranchSettings
from ira.runtime.store import artifacts, budget, runs, steps
from ira.runtime.store.database import Database
from ira.runtime.store.schema import attempts
from ira.runtime.wakeup import step_wakeup
from ira.triage.tables import changes
from tests.agents import fixtures as fx
from tests.agents.scenario import SLICE, TENANT, binding, create_branch_run

DEPLOY_AT = fx.SPLIT - timedelta(minutes=1)


def metrics_bundle(directory: Path, settings: MetricsBranchSettings) -> Path:
    """A recording of what Prometheus answered for the metrics plan: p95 jumps at the split."""
    b = binding(BranchKind.METRICS, fx.START, fx.END)
    task = BranchTask(kind=BranchKind.METRICS, binding=b, run_id="r", step_id="metrics")
    times = [fx.START + timedelta(seconds=15 * i) for i in range(121)]
    shapes = {"latency_p95": (0.21, 2.1), "latency_p99": (0.3, 2.6), "error_ratio": (0.002, 0.07),
              "saturation": (0.35, 1.0)}
    lines = []
    for p in planner(settings)(task):
        if p.tool != "prometheus.query_range":
            continue
        name = p.rationale.split("|")[-1]
        if name == "version":
            series = (MetricSeries(labels={"version": "v2"}, points=tuple((t, 1.0) for t in times if t < fx.SPLIT)),
                      MetricSeries(labels={"version": "v3"}, points=tuple((t, 1.0) for t in times if t >= fx.SPLIT)))
        else:
            low, high = shapes[name]
            series = (MetricSeries(labels={}, points=tuple((t, low if t < fx.SPLIT else high) for t in times)),)
        result = MetricResult(query=p.args["query"], start=fx.START, end=fx.END, step_seconds=15, series=series)
        lines.append(Recording(port="metrics.query_range", key=query_key(p.args["query"]), start=fx.START,
                               end=fx.END, request=p.args, result=result.model_dump(mode="json")).model_dump_json())
    directory.mkdir(parents=True)
    (directory / "observations.jsonl").write_text("\n".join(lines) + "\n")
    (directory / "bundle.json").write_text(BundleInfo(
        bundle_id="test", tenant_id=TENANT, environment="prod", service="order-service",
        alert_name="OrderServiceHighLatency", window_start=fx.START, window_end=fx.END).model_dump_json())
    return directory


async def record_deploy(db: Database) -> None:
    """What triage stores for a change event (its table, migration 0002_triage)."""
    async with db.transaction() as conn:
        await conn.execute(insert(changes).values(
            tenant_id=TENANT, event_id=new_id("chg"), source_id="changes", source_event_id="deploy-1",
            service="order-service", environment="prod", version="v3", commit="7c1d9e2", actor="deploy-bot",
            at=DEPLOY_AT, url=None, description="rolling deploy", received_at=DEPLOY_AT))


def connectors(db: Database, tmp_path: Path, metrics: ConnectorSet) -> ConnectorSet:
    return ConnectorSet(metrics=metrics.metrics, logs=JsonlLogSource(str(fx.write_logs(tmp_path / "app.jsonl"))),
                        runbooks=FileRunbookSource(fx.write_runbooks(tmp_path / "runbooks")),
                        changes=SqlChangeSource(db))


def dispatcher(db: Database, tmp_path: Path, bound: ConnectorSet) -> StepDispatcher:
    settings = load_settings({"IRA_DATABASE_URL": f"sqlite:///{tmp_path / 'unused.db'}"})
    settings = settings.model_copy(update={"agents": AgentsSettings()})
    handlers = build_handlers(settings, db=db, clock=FrozenClock(fx.NOW), connectors=bound)
    return StepDispatcher(db=db, clock=FrozenClock(fx.NOW), handlers=handlers, owner="agents-test")


async def result_of(db: Database, run_id: str, step_id: str) -> tuple[StepState, BranchResult]:
    async with db.reader() as conn:
        step = await steps.get_step(conn, TENANT, run_id, step_id)
        assert step.result_ref is not None
        _, body = await artifacts.get_artifact(conn, TENANT, step.result_ref)
    return step.state, BranchResult.model_validate_json(body)


async def test_three_branches_finish_with_results_and_the_join_is_promoted(db: Database, tmp_path: Path) -> None:
    await record_deploy(db)
    recorded = recorded_connectors(metrics_bundle(tmp_path / "bundle", MetricsBranchSettings()))
    labels = {"version": "v3", "alert_started_at": fx.SPLIT.isoformat()}
    bindings = {k: binding(k, fx.START, fx.END, labels=labels) for k in BranchKind}
    run_id = await create_branch_run(db, bindings, at=fx.NOW)
    worker = dispatcher(db, tmp_path, connectors(db, tmp_path, recorded))
    for kind in BranchKind:
        await worker.handle_wakeup(step_wakeup(TENANT, run_id, kind.value, kind=kind.value, environment="prod",
                                               at=fx.NOW).envelope)
    results = {k: await result_of(db, run_id, k.value) for k in BranchKind}
    assert {k: (s, r.stop_reason) for k, (s, r) in results.items()} == {
        k: (StepState.DONE, StopReason.DONE) for k in BranchKind}
    metrics = results[BranchKind.METRICS][1]
    text = " | ".join(e.summary for e in metrics.evidence)
    assert "p95 latency of order-service rose from 0.210 s to 2.100 s" in text
    assert "deploy of order-service v3 (commit 7c1d9e2) by deploy-bot" in text
    assert any("deploy of order-service v3" in h.statement and h.confidence >= 0.7 for h in metrics.hypotheses)
    assert all(e.artifact_ref for e in metrics.evidence)
    assert metrics.usage[Dim.TOOL_CALLS] == 7 and metrics.usage[Dim.STEPS] == 8  # + the discovery query
    async with db.reader() as conn:
        join = await steps.get_step(conn, TENANT, run_id, "join")
        events = await runs.list_events(conn, TENANT, run_id)
        root = await budget.get_balance(conn, TENANT, run_id, Dim.TOOL_CALLS)
        usage = [r.usage for r in await conn.execute(select(attempts.c.usage).where(attempts.c.run_id == run_id))]
    assert join.state == StepState.READY
    finished = [e.data for e in events if e.type == FINISHED_EVENT]
    assert sorted(f["branch"] for f in finished) == ["logs", "metrics", "runbooks"]
    assert [e.run_seq for e in events] == list(range(1, len(events) + 1))
    assert (root.reserved, root.settled) == (0, 7 + 2 + 1)  # slices closed: the root pays what was used
    assert sorted(u["tool_calls"] for u in usage) == [1, 2, 7]


async def test_a_branch_whose_tools_all_fail_is_failed_with_its_result(db: Database, tmp_path: Path) -> None:
    bindings = {BranchKind.METRICS: binding(BranchKind.METRICS, fx.START, fx.END)}
    run_id = await create_branch_run(db, bindings, at=fx.NOW)
    worker = dispatcher(db, tmp_path, ConnectorSet())  # neither Prometheus nor a change source configured
    await worker.handle_wakeup(step_wakeup(TENANT, run_id, "metrics", kind="metrics", environment="prod",
                                           at=fx.NOW).envelope)
    state, result = await result_of(db, run_id, "metrics")
    assert state == StepState.FAILED and result.stop_reason == StopReason.ERROR
    assert "not_configured" in (result.error or "")
    assert result.gap is not None and "prometheus.query_range" in result.gap  # the join reports a gap, not a failure
    assert result.usage[Dim.TOOL_CALLS] == 4  # deployments.list once, then 3 identical query failures: no_progress


async def test_a_binding_for_another_tenant_fails_the_step_without_a_call(db: Database, tmp_path: Path) -> None:
    other = binding(BranchKind.LOGS, fx.START, fx.END).model_copy(update={"tenant_id": "acme"})
    run_id = await create_branch_run(db, {BranchKind.LOGS: other}, at=fx.NOW)
    source = JsonlLogSource(str(fx.write_logs(tmp_path / "app.jsonl")))
    await dispatcher(db, tmp_path, ConnectorSet(logs=source)).handle_wakeup(
        step_wakeup(TENANT, run_id, "logs", kind="logs", environment="prod", at=fx.NOW).envelope)
    state, result = await result_of(db, run_id, "logs")
    assert state == StepState.FAILED and "another tenant" in (result.error or "")
    async with db.reader() as conn:
        kinds = [e.type for e in await runs.list_events(conn, TENANT, run_id)]
    assert "AGENT_TURN" not in kinds


async def test_slice_limits_are_what_the_branch_may_spend(db: Database, tmp_path: Path) -> None:
    await record_deploy(db)
    recorded = recorded_connectors(metrics_bundle(tmp_path / "bundle", MetricsBranchSettings()))
    tight = binding(BranchKind.METRICS, fx.START, fx.END, slice_=SLICE | {Dim.TOOL_CALLS: 3})
    run_id = await create_branch_run(db, {BranchKind.METRICS: tight}, at=fx.NOW)
    await dispatcher(db, tmp_path, connectors(db, tmp_path, recorded)).handle_wakeup(
        step_wakeup(TENANT, run_id, "metrics", kind="metrics", environment="prod", at=fx.NOW).envelope)
    state, result = await result_of(db, run_id, "metrics")
    assert (state, result.stop_reason) == (StepState.DONE, StopReason.BUDGET_EXHAUSTED)
    assert result.usage[Dim.TOOL_CALLS] == 3
    assert any("p95 latency" in e.summary for e in result.evidence)  # partial evidence is reported
    assert json.loads(result.model_dump_json())["branch"] == "metrics"
