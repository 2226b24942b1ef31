"""Decisions in (``ira.incidents.v1``): C1 for ``create_run``; a ``deliver`` of an older triage
is handed to :mod:`ira.coordinator.updates` as a one-alert update.

Runs inside the consumer's transaction, together with the inbox row, so a decision is
applied exactly once however often Kafka delivers it; ``create_run`` is also idempotent on
the evaluation id (the run's idempotency key), so a re-published decision finds its run.
"""

from __future__ import annotations

import logging
from datetime import datetime

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncConnection

from ira.coordinator import updates
from ira.coordinator.config import WorkflowConfig
from ira.coordinator.messages import parse_message
from ira.coordinator.workflow import plan_run
from ira.core.alert import DecisionKind
from ira.core.commit import EventDraft, RunCommit
from ira.core.decision import DECISION_MESSAGE, IncidentDecision
from ira.core.envelope import Envelope
from ira.core.events import RunEventType
from ira.core.run import Run
from ira.core.states import TERMINAL_RUN_STATES, RunState
from ira.runtime.runtrace import current_traceparent
from ira.runtime.store import budget, runs, timers
from ira.runtime.store.rows import run_from_row
from ira.runtime.store.schema import runs as runs_table

log = logging.getLogger(__name__)


def parse_decision(envelope: Envelope) -> IncidentDecision:
    """The envelope's decision, or InvalidMessageError (poison: it goes to the DLQ)."""
    return parse_message(envelope, IncidentDecision, message_type=DECISION_MESSAGE, what="decision",
                         topic="incidents")


async def apply_decision(
    conn: AsyncConnection, decision: IncidentDecision, *, config: WorkflowConfig, at: datetime,
) -> Run | None:
    """Apply one decision; returns the run it created or delivered to (None if nothing)."""
    if decision.decision == DecisionKind.CREATE_RUN:
        return await accept(conn, decision, config=config, at=at)
    if decision.decision == DecisionKind.DELIVER:  # an older triage's one-alert follow-up
        run = await open_run_for(conn, decision.tenant_id, decision.incident_id)
        if run is None:
            log.info("deliver %s: incident %s has no open run", decision.evaluation_id, decision.incident_id)
            return None
        update = updates.from_decision(decision, run_id=run.run_id)
        return await updates.apply_update(conn, update, config=config, at=at)
    return None


async def accept(conn: AsyncConnection, decision: IncidentDecision, *, config: WorkflowConfig, at: datetime) -> Run:
    """C1: task, run, steps, contract, bindings, root budget and slices, deadline, wake-ups."""
    t = decision.tenant_id
    if (same := await _by_key(conn, t, decision.evaluation_id)) is not None:
        return same
    if (open_run := await open_run_for(conn, t, decision.incident_id)) is not None:
        await runs.append_events(conn, t, open_run.run_id, [EventDraft(type=RunEventType.DECISION_REFUSED, data={
            "evaluation_id": decision.evaluation_id, "reason": "the incident already has an open run"})], at=at)
        return open_run
    plan = plan_run(decision, config, now=at)
    new_run = plan.new_run.model_copy(update={"traceparent": current_traceparent()})
    run, _ = await runs.create_run(conn, new_run, at=at)
    await budget.open_account(conn, t, run.run_id, plan.root_budget)
    await budget.open_slices(conn, t, run.run_id, plan.slices, at=at)
    await timers.schedule_timer(conn, plan.deadline)
    return await runs.commit(conn, RunCommit(
        tenant_id=t, run_id=run.run_id, expected_version=run.state_version, state=RunState.RUNNING,
        events=(EventDraft(type=RunEventType.RUN_STARTED,
            data={"branch_deadline": plan.deadline.due_at.isoformat(), "branches": list(plan.slices)}),)), at=at)


async def open_run_for(conn: AsyncConnection, tenant_id: str, incident_id: str) -> Run | None:
    row = (await conn.execute(select(runs_table).where(
        runs_table.c.tenant_id == tenant_id, runs_table.c.incident_id == incident_id,
        runs_table.c.state.not_in(TERMINAL_RUN_STATES)).order_by(runs_table.c.created_at.desc()).limit(1))).first()
    return run_from_row(row) if row else None


async def _by_key(conn: AsyncConnection, tenant_id: str, key: str) -> Run | None:
    row = (await conn.execute(select(runs_table).where(
        runs_table.c.tenant_id == tenant_id, runs_table.c.idempotency_key == key))).first()
    return run_from_row(row) if row else None
