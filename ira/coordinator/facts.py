"""Reads every coordinator flow shares: artifacts as models, the incident's current
version, the fence of a claim, and the one-step charge against the run's root budget."""

from __future__ import annotations

from datetime import datetime
from typing import TypeVar

from pydantic import ValidationError
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncConnection

from ira.coordinator import records
from ira.coordinator.config import WorkflowConfig
from ira.core.artifact import ArtifactRef
from ira.core.budget import BudgetDimension
from ira.core.commit import Fence
from ira.core.errors import NotFoundError
from ira.core.events import RunEventType
from ira.core.model import Model
from ira.core.run import Claim, Run
from ira.runtime.store import budget
from ira.runtime.store.artifacts import get_artifact, put_artifact
from ira.runtime.store.rows import run_from_row
from ira.runtime.store.schema import events
from ira.runtime.store.schema import runs as runs_table

M = TypeVar("M", bound=Model)
ALERT_DELIVERED = RunEventType.ALERT_DELIVERED
INCIDENT_UPDATED = RunEventType.INCIDENT_UPDATED


async def lock_run(conn: AsyncConnection, tenant_id: str, run_id: str) -> Run:
    """Read the run to decide on it and commit in this transaction: the row lock makes
    concurrent writers (three branches finishing at once, a cancel) queue instead of losing
    the compare-and-set on PostgreSQL; SQLite's single writer already serializes them."""
    row = (await conn.execute(select(runs_table).where(
        runs_table.c.tenant_id == tenant_id, runs_table.c.run_id == run_id).with_for_update())).first()
    if row is None:
        raise NotFoundError(f"run {run_id} not found")
    return run_from_row(row)


def fence(claim: Claim) -> Fence:
    return Fence(step_id=claim.step_id, owner_epoch=claim.owner_epoch)


async def load_model(conn: AsyncConnection, tenant_id: str, ref: str | None, *, model: type[M]) -> M | None:
    """The artifact ``ref`` parsed as ``model``; None if absent or unreadable (never trusted blindly)."""
    if not ref:
        return None
    try:
        _, body = await get_artifact(conn, tenant_id, ref)
        return model.model_validate_json(body)
    except (NotFoundError, ValidationError):
        return None


async def store_json(
    conn: AsyncConnection, tenant_id: str, body: bytes, *, config: WorkflowConfig, at: datetime,
) -> ArtifactRef:
    return await put_artifact(conn, tenant_id, body, media_type="application/json",
                              max_bytes=config.artifact_max_bytes, at=at)


async def incident_version(conn: AsyncConnection, run: Run) -> int:
    """The incident's newest version this run knows and its approval binds to: at acceptance, in
    drafts, or delivered since; of coalesced updates only those that changed the draft's substance
    (another alert of a known name leaves the approval standing)."""
    known = [int(run.bindings.get("incident_version", 0))]
    draft = await records.current_draft(conn, run.tenant_id, run.run_id)
    if draft is not None:
        known.append(draft.incident_version)
    rows = await conn.execute(select(events.c.type, events.c.data).where(
        events.c.tenant_id == run.tenant_id, events.c.run_id == run.run_id,
        events.c.type.in_((ALERT_DELIVERED, INCIDENT_UPDATED))))
    known += [int(r.data.get("incident_version", 0)) for r in rows
              if r.type == ALERT_DELIVERED or r.data.get("substantive")]
    return max(known)


async def has_event(conn: AsyncConnection, run: Run, event_type: RunEventType) -> bool:
    """Whether the run's log holds an event of ``event_type``."""
    row = (await conn.execute(select(events.c.run_seq).where(
        events.c.tenant_id == run.tenant_id, events.c.run_id == run.run_id, events.c.type == event_type)
        .limit(1))).first()
    return row is not None


async def charge_step(conn: AsyncConnection, claim: Claim, *, config: WorkflowConfig, at: datetime) -> None:
    """One ``steps`` unit from the root, once per claim; BudgetExhaustedError when none is left."""
    if BudgetDimension.STEPS not in config.root_budget:
        return
    rid = f"step:{claim.run_id}:{claim.step_id}:{claim.owner_epoch}"  # reservation ids are unique per tenant
    await budget.charge(conn, claim.tenant_id, claim.run_id, BudgetDimension.STEPS, 1, reservation_id=rid, at=at)
