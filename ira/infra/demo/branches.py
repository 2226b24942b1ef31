"""Run the three branches outside the platform: the recorder and the benchmark use it.

It does what the coordinator will do (a run with branch steps, bindings and budget slices on a
scratch SQLite database) and then drives each branch through the real step dispatcher and
branch handler, so a recording or a measurement covers claim -> loop -> committed result.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
from sqlalchemy import insert

from ira.agents.main import build_handlers
from ira.connectors.bound import ConnectorSet
from ira.connectors.deployments import SqlChangeSource
from ira.connectors.logs.jsonl import JsonlLogSource
from ira.connectors.prometheus import PrometheusMetricSource
from ira.connectors.recorded import BundleInfo, Recorder
from ira.connectors.runbooks import FileRunbookSource
from ira.core.budget import BudgetDimension as Dim
from ira.core.clock import SystemClock
from ira.core.commit import NewRun, NewStep
from ira.core.ids import new_id
from ira.core.investigation import BranchBinding, BranchKind, BranchResult
from ira.core.states import StepState
from ira.infra.demo import DEMO_BUNDLE, RUNBOOKS_DIR, SERVICE
from ira.runtime.dispatch import StepDispatcher
from ira.runtime.settings import Settings, load_settings
from ira.runtime.store import artifacts, budget, runs, steps
from ira.runtime.store.database import Database
from ira.runtime.store.migrate import upgrade
from ira.runtime.wakeup import step_wakeup

TENANT, ENVIRONMENT = "demo", "prod"
SLICE = {Dim.STEPS: 12, Dim.TOOL_CALLS: 30, Dim.MODEL_TOKENS: 80_000, Dim.COST_MICROS: 1_500_000,
         Dim.WALL_MS: 900_000}
TOOLS = {BranchKind.METRICS: ("prometheus.query_range", "prometheus.query", "deployments.list"),
         BranchKind.LOGS: ("logs.search",), BranchKind.RUNBOOKS: ("runbooks.search",)}


async def scratch_db(home: Path) -> Database:
    db = Database.create(f"sqlite:///{home / 'ira.db'}")
    await upgrade(db)
    return db


def bindings(alert: Mapping[str, Any], window: tuple[datetime, datetime]) -> dict[BranchKind, BranchBinding]:
    """What the coordinator binds: the alert's labels (with its start) ride along as ``labels``."""
    labels = {**alert["labels"], **{k: v for k, v in alert.get("annotations", {}).items() if isinstance(v, str)},
              "alert_started_at": alert["startsAt"]}
    return {kind: BranchBinding(
        tenant_id=TENANT, environment=ENVIRONMENT, service=alert["labels"].get("service"), incident_id="inc_demo",
        alert_name=alert["labels"]["alertname"], window_start=window[0], window_end=window[1], tools=TOOLS[kind],
        budget=SLICE, deadline=datetime.now(UTC) + timedelta(minutes=10), labels=labels) for kind in BranchKind}


async def create_run(db: Database, bound: Mapping[BranchKind, BranchBinding]) -> str:
    run_id, at = new_id("run"), datetime.now(UTC)
    plan = [NewStep(step_id=k.value, kind=k.value, state=StepState.READY, binding=b.model_dump(mode="json"))
            for k, b in bound.items()]
    plan.append(NewStep(step_id="join", kind="join", state=StepState.BLOCKED, depends_on=tuple(k.value for k in bound)))
    new = NewRun(tenant_id=TENANT, run_id=run_id, task_id=new_id("task"), task_kind="diagnose",
                 subject_ref="incident:inc_demo", workflow="incident-diagnosis@1", incident_id="inc_demo",
                 steps=tuple(plan))
    async with db.transaction() as conn:
        await runs.create_run(conn, new, at=at)
        await budget.open_account(conn, TENANT, run_id, {d: 3 * v for d, v in SLICE.items()})
        for kind, b in bound.items():
            await budget.open_slice(conn, TENANT, run_id, kind.value, b.budget, at=at)
    return run_id


async def record_change(db: Database, change: Mapping[str, Any]) -> None:
    """What triage stores for the deploy's change event."""
    from ira.triage.tables import changes

    at = datetime.fromisoformat(str(change["at"]).replace("Z", "+00:00"))
    async with db.transaction() as conn:
        await conn.execute(insert(changes).values(
            tenant_id=TENANT, event_id=new_id("chg"), source_id="changes", source_event_id=str(change["id"]),
            service=change["service"], environment=ENVIRONMENT, version=change.get("version"),
            commit=change.get("commit"), actor=change.get("actor"), at=at, url=None,
            description=change.get("description"), received_at=at))


def dispatcher(db: Database, connectors: ConnectorSet, settings: Settings | None = None) -> StepDispatcher:
    settings = settings or load_settings({"IRA_DATABASE_URL": "sqlite:///unused.db"})
    handlers = build_handlers(settings, db=db, clock=SystemClock(), connectors=connectors)
    return StepDispatcher(db=db, clock=SystemClock(), handlers=handlers, owner="demo-branches")


async def run_step(db: Database, worker: StepDispatcher, *, run_id: str, kind: BranchKind) -> BranchResult:
    """Claim and run one branch step through the dispatcher; return its committed result."""
    await worker.handle_wakeup(step_wakeup(TENANT, run_id, kind.value, kind=kind.value, environment=ENVIRONMENT,
                                           at=datetime.now(UTC)).envelope)
    async with db.reader() as conn:
        step = await steps.get_step(conn, TENANT, run_id, kind.value)
        if step.result_ref is None:
            raise RuntimeError(f"{kind.value} finished without a result (state {step.state.value})")
        _, body = await artifacts.get_artifact(conn, TENANT, step.result_ref)
    return BranchResult.model_validate_json(body)


async def run_branches(
    home: Path, recorder: Recorder, *, change: Mapping[str, Any], alert: Mapping[str, Any], prometheus: str,
    log: Path, window: tuple[datetime, datetime],
) -> tuple[dict[str, Any], BundleInfo]:
    """The three branches over live connectors wrapped by ``recorder``; results as JSON."""
    db = await scratch_db(home)
    try:
        await record_change(db, change)
        async with httpx.AsyncClient(base_url=prometheus, timeout=10) as client:
            live = ConnectorSet(metrics=PrometheusMetricSource(client), logs=JsonlLogSource(str(log)),
                                runbooks=FileRunbookSource(RUNBOOKS_DIR), changes=SqlChangeSource(db))
            bound = bindings(alert, window)
            run_id = await create_run(db, bound)
            worker = dispatcher(db, recorder.wrap(live))
            results = {}
            for kind in BranchKind:
                results[kind.value] = (await run_step(db, worker, run_id=run_id, kind=kind)).model_dump(mode="json")
    finally:
        await db.close()
    info = BundleInfo(bundle_id=DEMO_BUNDLE.name, tenant_id=TENANT, environment=ENVIRONMENT, service=SERVICE,
                      alert_name=alert["labels"]["alertname"], window_start=window[0], window_end=window[1],
                      version=alert["labels"].get("version"),
                      description="order-service p95 latency after the v3 deploy saturates the DB pool")
    return results, info
