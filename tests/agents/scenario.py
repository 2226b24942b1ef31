"""What the coordinator does before an agent runs: a run with branch steps, bindings, a budget
slice per branch. Tests build exactly that, then claim a step as a dispatcher would."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, timedelta

from ira.core.budget import BudgetDimension as Dim
from ira.core.commit import NewRun, NewStep
from ira.core.ids import new_id
from ira.core.investigation import BranchBinding, BranchKind
from ira.core.run import Claim
from ira.core.states import StepState
from ira.runtime.store import budget, runs, steps
from ira.runtime.store.database import Database
from ira.runtime.wakeup import step_wakeup

TENANT = "demo"
SERVICE = "order-service"
ROOT = {Dim.STEPS: 60, Dim.TOOL_CALLS: 120, Dim.MODEL_TOKENS: 300_000, Dim.COST_MICROS: 5_000_000,
        Dim.WALL_MS: 3_600_000}
SLICE = {Dim.STEPS: 12, Dim.TOOL_CALLS: 30, Dim.MODEL_TOKENS: 80_000, Dim.COST_MICROS: 1_500_000,
         Dim.WALL_MS: 900_000}
TOOLS = {BranchKind.METRICS: ("prometheus.query_range", "prometheus.query", "deployments.list"),
         BranchKind.LOGS: ("logs.search",), BranchKind.RUNBOOKS: ("runbooks.search",)}


def binding(kind: BranchKind, start: datetime, end: datetime, *, deadline: datetime | None = None,
            slice_: Mapping[Dim, int] = SLICE, labels: dict[str, str] | None = None,
            tools: tuple[str, ...] | None = None) -> BranchBinding:
    return BranchBinding(
        tenant_id=TENANT, environment="prod", service=SERVICE, incident_id="inc_demo",
        alert_name="OrderServiceHighLatency", window_start=start, window_end=end,
        tools=tools if tools is not None else TOOLS[kind], budget=dict(slice_),
        deadline=deadline or end + timedelta(hours=1), labels=labels or {})


async def create_branch_run(
    db: Database, bindings: Mapping[BranchKind, BranchBinding], *, at: datetime,
    root: Mapping[Dim, int] = ROOT,
) -> str:
    """A run whose branch steps are READY (with bindings) and a join BLOCKED on them; each
    branch's budget slice opened from the root, as the coordinator does."""
    run_id = new_id("run")
    plan = [NewStep(step_id=k.value, kind=k.value, state=StepState.READY, binding=b.model_dump(mode="json"))
            for k, b in bindings.items()]
    after = tuple(k.value for k in bindings)
    plan.append(NewStep(step_id="join", kind="join", state=StepState.BLOCKED, depends_on=after))
    new = NewRun(tenant_id=TENANT, run_id=run_id, task_id=new_id("task"), task_kind="diagnose",
                 subject_ref="incident:inc_demo", workflow="incident-diagnosis@1", incident_id="inc_demo",
                 steps=tuple(plan),
                 outbox=tuple(step_wakeup(TENANT, run_id, k.value, kind=k.value, environment="prod", at=at)
                              for k in bindings))
    async with db.transaction() as conn:
        await runs.create_run(conn, new, at=at)
        await budget.open_account(conn, TENANT, run_id, root)
        for kind, b in bindings.items():
            await budget.open_slice(conn, TENANT, run_id, kind.value, b.budget, at=at)
    return run_id


async def claim(db: Database, run_id: str, kind: BranchKind, *, at: datetime, owner: str = "agent-1",
                lease: timedelta = timedelta(minutes=5)) -> Claim:
    async with db.transaction() as conn:
        found = await steps.claim_step(conn, TENANT, run_id, kind.value, owner=owner, lease=lease, now=at)
    assert found is not None
    return found
