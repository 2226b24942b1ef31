"""Decisions in (``ira.incidents.v1``): C1 for ``create_run``; a ``deliver`` of an older triage
is handed to :mod:`ira.coordinator.updates` as a one-alert update.

Runs inside the consumer's transaction, together with the inbox row, so a decision is
applied exactly once however often Kafka delivers it; ``create_run`` is also idempotent on
the evaluation id (the run's idempotency key), so a re-published decision finds its run.
"""

from __future__ import annotations

import logging
from datetime import datetime

from sqlalchemy import bindparam, desc, select, union_all
from sqlalchemy.ext.asyncio import AsyncConnection

from ira.coordinator import updates
from ira.coordinator.config import WorkflowConfig
from ira.coordinator.messages import parse_message
from ira.coordinator.workflow import plan_run
from ira.core.alert import DecisionKind
from ira.core.commit import EventDraft
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
_r = runs_table.c
_EXISTING = union_all(
    select(runs_table).where(_r.tenant_id == bindparam("k_tenant"), _r.idempotency_key == bindparam("k_key")),
    select(runs_table).where(_r.tenant_id == bindparam("k_tenant"), _r.incident_id == bindparam("k_incident"),
                             _r.state.not_in(TERMINAL_RUN_STATES)),
).order_by(desc("created_at"))
"""A decision's run by key and its incident's open runs (at most one open, one keyed), built once.
Two reads in one statement, each on its own index: as one ``tenant = ? AND (key = ? OR (incident
= ? AND ...))``, SQLite searched ``ix_runs_tenant_id_state`` by tenant alone, reading every run
of the tenant for each decision (a start that got slower with the tenant's history). A run that
matches both comes back twice; ``_existing`` takes the first of each kind."""


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
    same, open_run = await _existing(conn, t, decision.evaluation_id, decision.incident_id)
    if same is not None:
        return same
    if open_run is not None:
        await runs.append_events(conn, t, open_run.run_id, [EventDraft(type=RunEventType.DECISION_REFUSED, data={
            "evaluation_id": decision.evaluation_id, "reason": "the incident already has an open run"})], at=at)
        return open_run
    plan = plan_run(decision, config, now=at)
    started = EventDraft(type=RunEventType.RUN_STARTED,
                         data={"branch_deadline": plan.deadline.due_at.isoformat(), "branches": list(plan.slices)})
    run, _ = await runs.create_run(conn, plan.new_run.model_copy(update={
        "traceparent": current_traceparent(), "state": RunState.RUNNING,
        "events": (*plan.new_run.events, started)}), at=at, key_checked=True)
    # the deadline before the budget: on PostgreSQL its INSERT goes with the run's other rows,
    # ahead of the root's hold (pg_fast.write_later), instead of on its own before COMMIT
    await timers.schedule_timer(conn, plan.deadline)
    await budget.open_account(conn, t, run.run_id, plan.root_budget)
    await budget.open_slices(conn, t, run.run_id, plan.slices, at=at)
    return run


_OPEN_RUN = select(runs_table).where(_r.tenant_id == bindparam("k_tenant"), _r.incident_id == bindparam("k_incident"),
                                     _r.state.not_in(TERMINAL_RUN_STATES)).order_by(_r.created_at.desc()).limit(1)
"""Built once, as ``_EXISTING``: every one-alert follow-up of an incident reads it."""


async def open_run_for(conn: AsyncConnection, tenant_id: str, incident_id: str) -> Run | None:
    row = (await conn.execute(_OPEN_RUN, {"k_tenant": tenant_id, "k_incident": incident_id})).first()
    return run_from_row(row) if row else None


async def _existing(conn: AsyncConnection, tenant_id: str, key: str, incident_id: str) -> tuple[Run | None, Run | None]:
    """(the run of this decision's key, else None; the incident's newest open run, else None), in one
    read: a re-published decision finds its own run before it is refused for an open one."""
    rows = (await conn.execute(_EXISTING, {"k_tenant": tenant_id, "k_key": key, "k_incident": incident_id})).all()
    same = next((r for r in rows if r.idempotency_key == key), None)
    open_run = next((r for r in rows if r.incident_id == incident_id and r.state not in TERMINAL_RUN_STATES), None)
    return (run_from_row(same) if same else None), (run_from_row(open_run) if open_run else None)
