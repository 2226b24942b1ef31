"""A replay's run as the comparison reads it: which run an alert of the replay started, and its outcome.

The outcome holds no ids or times but the duration, so two replays that decided the same
things have equal outcomes.
"""

from __future__ import annotations

from collections.abc import Awaitable
from datetime import datetime
from typing import TypeVar

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncConnection

from ira.core.errors import NotFoundError
from ira.core.investigation import BranchKind, BranchResult
from ira.core.replay import REPLAY_LABEL, STAGING, BranchOutcome, Outcome
from ira.readmodel import detail, incidents, reports
from ira.readmodel.runs import RunSummary, summary_of
from ira.runtime.store import artifacts
from ira.runtime.store.schema import runs

T = TypeVar("T")
BRANCHES = frozenset(k.value for k in BranchKind)
TIMES = frozenset({"wall_ms"})
"""Budget dimensions that measure time: shown as the duration, never compared (a replay runs at its own pace)."""
LOOK_AT = 200
"""Staging runs created since the replay started that are searched for its label."""


async def replay_run(conn: AsyncConnection, tenant_id: str, replay_id: str, *, since: datetime) -> RunSummary | None:
    """The staging run started by an alert of the replay (its alert carries the replay's label)."""
    rows = await conn.execute(select(runs).where(
        runs.c.tenant_id == tenant_id, runs.c.environment == STAGING, runs.c.created_at >= since)
        .order_by(runs.c.created_at).limit(LOOK_AT))
    for row in rows:
        if ((row.bindings or {}).get("alert_labels") or {}).get(REPLAY_LABEL) == replay_id:
            return summary_of(row, ticket=None)
    return None


async def run_outcome(conn: AsyncConnection, tenant_id: str, run_id: str) -> Outcome:
    run = await detail.run_detail(conn, tenant_id, run_id)
    report = await _or_none(reports.report_view(conn, tenant_id, run_id))
    draft = await _or_none(reports.draft_view(conn, tenant_id, run_id))
    return Outcome(
        run_state=run.state.value + (f" ({run.wait_kind.value})" if run.wait_kind else ""),
        decisions=await _decisions(conn, tenant_id, run.incident_id),
        branches=await branch_outcomes(conn, tenant_id, run),
        hypotheses=[h.statement for h in report.hypotheses] if report else [],
        facts=[f.summary for f in report.facts] if report else [],
        draft_title=draft.title if draft else None, draft_body=draft.body if draft else None,
        approvals=[f"{a.action}: {a.state.value}" + (f" by {a.decided_by}" if a.decided_by else "")
                   for a in run.approvals],
        operations=[f"{o.kind}: {o.fact_state.value}" for o in run.operations],
        budget_used={dim: line.settled for dim, line in run.budget.items() if dim not in TIMES},
        duration_seconds=round((run.updated_at - run.created_at).total_seconds(), 3))


async def branch_outcomes(conn: AsyncConnection, tenant_id: str, run: detail.RunDetail) -> dict[str, BranchOutcome]:
    found = {}
    for step in run.steps:
        if step.kind not in BRANCHES or not step.result_ref:
            continue
        result = BranchResult.model_validate_json((await artifacts.get_artifact(conn, tenant_id, step.result_ref))[1])
        found[step.step_id] = BranchOutcome(stop_reason=result.stop_reason.value, error=result.error,
                                            hypotheses=[h.statement for h in result.hypotheses],
                                            evidence=[e.summary for e in result.evidence])
    return found


async def _decisions(conn: AsyncConnection, tenant_id: str, incident_id: str | None) -> list[str]:
    if incident_id is None:
        return []
    incident = await incidents.incident_detail(conn, tenant_id, incident_id)
    return [e.decision + (f": {e.reason}" if e.decision == "ignore" else "") for e in incident.evaluations]


async def _or_none(read: Awaitable[T]) -> T | None:
    """Before synthesis a run has no report or draft: that is part of its outcome, not an error."""
    try:
        return await read
    except NotFoundError:
        return None
