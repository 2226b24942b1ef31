"""What the store holds of one run, as ``ira record`` turns it into a bundle.

The run (its bindings and branch steps), the alerts of its incident and the changes of its
service as they were stored, and every committed turn of its branches with the observation it
made. Nothing is shaped for a bundle here (that is ``ira.replay.record``), and nothing is
redacted yet: the caller redacts the whole bundle once, at the edge where it leaves ira.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncConnection

from ira.agents.tables import agent_turns
from ira.core.alert import AlertEvent, ChangeEvent
from ira.core.errors import NotFoundError
from ira.core.investigation import BranchBinding, BranchKind
from ira.core.model import Model
from ira.core.states import RunState
from ira.runtime.store import artifacts
from ira.runtime.store.schema import runs, steps
from ira.triage.tables import alerts, changes

BRANCHES = frozenset(k.value for k in BranchKind)
RECORDABLE = frozenset({RunState.WAITING, RunState.COMPLETED, RunState.FAILED, RunState.CANCELLED})
"""A run still running has no outcome to compare with yet."""
MAX_ALERTS = 1000
MAX_CHANGES = 200


class NotRecordableError(Exception):
    """The run exists but cannot be recorded (yet): it is still pending or running."""


class RecordedTurn(Model):
    turn: int
    decision: dict[str, Any]
    """The stored proposal (``kind``, ``tool``, ``args``; model call details under ``_`` keys)."""
    observation: dict[str, Any] | None
    """The stored observation (tool, ok, data or error), None for a turn that observed nothing."""


class RecordedBranch(Model):
    step_id: str
    kind: BranchKind
    binding: BranchBinding
    turns: tuple[RecordedTurn, ...]


class RunMaterial(Model):
    tenant_id: str
    run_id: str
    state: RunState
    environment: str
    incident_id: str | None
    bindings: dict[str, Any]
    created_at: datetime
    updated_at: datetime
    branches: tuple[RecordedBranch, ...]
    alerts: tuple[AlertEvent, ...]
    changes: tuple[ChangeEvent, ...]


async def run_material(conn: AsyncConnection, tenant_id: str, run_id: str) -> RunMaterial:
    row = (await conn.execute(select(runs).where(runs.c.tenant_id == tenant_id, runs.c.run_id == run_id))).first()
    if row is None:
        raise NotFoundError(f"run {run_id} not found")
    if RunState(row.state) not in RECORDABLE:
        raise NotRecordableError(f"run {run_id} is {row.state}: only a waiting or ended run can be recorded")
    branches = await _branches(conn, tenant_id, run_id)
    return RunMaterial(
        tenant_id=tenant_id, run_id=run_id, state=RunState(row.state), environment=row.environment,
        incident_id=row.incident_id,
        bindings=dict(row.bindings or {}), created_at=row.created_at, updated_at=row.updated_at,
        branches=branches, alerts=await _alerts(conn, tenant_id, row.incident_id, until=row.updated_at),
        changes=await _changes(conn, tenant_id, branches, until=row.updated_at))


async def _branches(conn: AsyncConnection, tenant_id: str, run_id: str) -> tuple[RecordedBranch, ...]:
    rows = await conn.execute(select(steps).where(steps.c.tenant_id == tenant_id, steps.c.run_id == run_id,
                                                  steps.c.kind.in_(BRANCHES)).order_by(steps.c.step_id))
    found = []
    for step in rows:
        turns = await _turns(conn, tenant_id, run_id, step.step_id)
        found.append(RecordedBranch(step_id=step.step_id, kind=BranchKind(step.kind),
                                    binding=BranchBinding.model_validate(step.binding), turns=turns))
    return tuple(found)


async def _turns(conn: AsyncConnection, tenant_id: str, run_id: str, step_id: str) -> tuple[RecordedTurn, ...]:
    t = agent_turns.c
    rows = await conn.execute(select(agent_turns).where(t.tenant_id == tenant_id, t.run_id == run_id,
                                                        t.step_id == step_id).order_by(t.turn))
    found = []
    for row in rows:
        observation = None
        if row.observation_ref:
            observation = json.loads((await artifacts.get_artifact(conn, tenant_id, row.observation_ref))[1])
            observation = await _with_raw_data(conn, tenant_id, observation)
        found.append(RecordedTurn(turn=row.turn, decision=dict(row.proposal), observation=observation))
    return tuple(found)


async def _with_raw_data(conn: AsyncConnection, tenant_id: str, observation: dict[str, Any]) -> dict[str, Any]:
    """An observation whose data was only kept as its own artifact gets it back."""
    ref = observation.get("artifact_ref")
    if observation.get("data") or not ref:
        return observation
    try:
        _, body = await artifacts.get_artifact(conn, tenant_id, ref)
    except NotFoundError:
        return observation
    return {**observation, "data": json.loads(body)}


async def _alerts(conn: AsyncConnection, tenant_id: str, incident_id: str | None,
                  *, until: datetime) -> tuple[AlertEvent, ...]:
    if incident_id is None:
        return ()
    rows = await conn.execute(select(alerts.c.payload).where(
        alerts.c.tenant_id == tenant_id, alerts.c.incident_id == incident_id, alerts.c.received_at <= until)
        .order_by(alerts.c.received_at, alerts.c.event_id).limit(MAX_ALERTS))
    return tuple(AlertEvent.model_validate(r.payload) for r in rows)


async def _changes(conn: AsyncConnection, tenant_id: str, branches: tuple[RecordedBranch, ...],
                   *, until: datetime) -> tuple[ChangeEvent, ...]:
    """The changes a branch could have listed: of its service and dependencies, inside its look-back."""
    if not branches:
        return ()
    bindings = [b.binding for b in branches]
    services = {s for b in bindings for s in b.services}
    since = min((b.changes_since or b.window_start) for b in bindings)
    c = changes.c
    rows = await conn.execute(select(changes).where(
        c.tenant_id == tenant_id, c.service.in_(services), c.at >= since, c.received_at <= until)
        .order_by(c.received_at, c.event_id).limit(MAX_CHANGES))
    return tuple(ChangeEvent.model_validate(dict(r._mapping)) for r in rows)
