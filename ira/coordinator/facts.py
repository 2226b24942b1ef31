"""Reads every coordinator flow shares: artifacts as models, the incident's current
version, the fence of a claim, and the one-step charge against the run's root budget."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Mapping
from datetime import datetime
from typing import Any, TypeVar

from pydantic import ValidationError
from sqlalchemy import and_, bindparam, select
from sqlalchemy.ext.asyncio import AsyncConnection
from sqlalchemy.sql import Select

from ira.coordinator import records
from ira.coordinator.config import WorkflowConfig
from ira.core.artifact import ArtifactRef
from ira.core.budget import BudgetDimension
from ira.core.commit import Fence
from ira.core.errors import ConcurrentUpdateError, NotFoundError, StaleEpochError
from ira.core.events import RunEventType
from ira.core.model import Model
from ira.core.run import Claim, Run, Step
from ira.runtime.store import budget, steps
from ira.runtime.store.artifact_cache import cache_of, remember
from ira.runtime.store.artifacts import get_artifact, put_artifact
from ira.runtime.store.rows import run_from_mapping, run_from_row, step_from_row
from ira.runtime.store.schema import artifacts, events
from ira.runtime.store.schema import runs as runs_table
from ira.runtime.store.schema import steps as steps_table

M = TypeVar("M", bound=Model)
T = TypeVar("T")
ALERT_DELIVERED = RunEventType.ALERT_DELIVERED
INCIDENT_UPDATED = RunEventType.INCIDENT_UPDATED
_ARTIFACTS = select(artifacts).where(
    artifacts.c.tenant_id == bindparam("k_tenant"), artifacts.c.ref.in_(bindparam("k_refs", expanding=True)))


async def lock_run(conn: AsyncConnection, tenant_id: str, run_id: str) -> Run:
    """Read the run to decide on it and commit in this transaction: the row lock makes
    concurrent writers (three branches finishing at once, a cancel) queue instead of losing
    the compare-and-set on PostgreSQL; SQLite's single writer already serializes them."""
    row = (await conn.execute(_LOCK_RUN, {"k_tenant": tenant_id, "k_run": run_id})).first()
    if row is None:
        raise NotFoundError(f"run {run_id} not found")
    return run_from_row(row)


async def on_known_run(known: Run | None, attempt: Callable[[Run | None], Awaitable[T]]) -> T:
    """``attempt(known)``, deciding on the run as this owner last saw it without reading it; if
    its commit's compare-and-set finds that the run moved since, ``attempt(None)`` once more,
    which reads it under lock (:func:`lock_run`). A stale epoch is raised as it is: a second try
    would be refused the same way.

    Callers pass ``known`` only for an attempt with no effect outside its transaction, so the
    first try leaves nothing behind, and where nothing the attempt reads can change unseen
    before it commits: SQLite (the transaction holds the database's write lock), or on
    PostgreSQL an attempt that reads nothing but the run it knows and whose first row lock is
    its fenced commit's (which takes the run's row before the step's, as ``lock_run`` does:
    a concurrent writer is waited for, then the compare-and-set finds the run moved). The
    coordinator's steps read more than the run (branch results, drafts, approvals) and charge
    the ledger before they commit: on PostgreSQL they pass None, where the row lock queues
    the writers."""
    if known is not None:
        try:
            return await attempt(known)
        except StaleEpochError:
            raise
        except ConcurrentUpdateError:
            pass
    return await attempt(None)


_LOCK_RUN = select(runs_table).where(runs_table.c.tenant_id == bindparam("k_tenant"),
                                     runs_table.c.run_id == bindparam("k_run")).with_for_update()
"""Built once (see ira/runtime/store/steps.py on why hot statements are)."""


async def lock_run_with_plan(conn: AsyncConnection, tenant_id: str, run_id: str) -> tuple[Run, list[Step]]:
    """:func:`lock_run` and the run's steps (``steps.list_steps``): on PostgreSQL in one statement
    (``_LOCK_RUN_WITH_PLAN``, a round trip fewer on the join's way), whose steps are as of the
    statement's start, before any wait for the run's row: where the lock found a version newer
    than that snapshot held (a commit of the run came in meanwhile), the steps are read again,
    after the lock. Changes that commit no version of the run (a claim, a lease renewed) may
    then be older than the lock: for a caller that judges finished steps (the join)."""
    if conn.dialect.name != "postgresql":
        return await lock_run(conn, tenant_id, run_id), await steps.list_steps(conn, tenant_id, run_id)
    rows = (await conn.execute(_LOCK_RUN_WITH_PLAN, {"k_tenant": tenant_id, "k_run": run_id})).all()
    if not rows:
        raise NotFoundError(f"run {run_id} not found")
    first = rows[0]._mapping
    run = run_from_mapping({c.name: first[_RUN_ + c.name] for c in runs_table.c})
    if first["snapshot_version"] != run.state_version:
        return run, await steps.list_steps(conn, tenant_id, run_id)
    return run, [step_from_row(r) for r in rows if r.step_id is not None]


_RUN_ = "run_"
"""The prefix of ``_LOCK_RUN_WITH_PLAN``'s columns that hold the locked run's."""


def _lock_run_with_plan() -> Select[Any]:
    """PostgreSQL: the run's row locked (``_LOCK_RUN``, a CTE: taken before anything is read of
    it) joined with its steps (none: one row of NULLs), each row with the run's version in the
    statement's snapshot (``snapshot_version``)."""
    locked = _LOCK_RUN.cte("locked")
    snapshot = select(runs_table.c.state_version).where(
        runs_table.c.tenant_id == bindparam("k_tenant"), runs_table.c.run_id == bindparam("k_run")).scalar_subquery()
    its_steps = and_(steps_table.c.tenant_id == locked.c.tenant_id, steps_table.c.run_id == locked.c.run_id)
    return select(*(locked.c[c.name].label(_RUN_ + c.name) for c in runs_table.c), snapshot.label("snapshot_version"),
                  *steps_table.c).select_from(locked.outerjoin(steps_table, its_steps)).order_by(steps_table.c.step_id)


_LOCK_RUN_WITH_PLAN = _lock_run_with_plan()


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


async def load_models(
    conn: AsyncConnection, tenant_id: str, refs: Iterable[str | None], *, model: type[M],
) -> dict[str, M]:
    """:func:`load_model` for several refs (a join's branches): those the artifact cache holds
    from it, the others in ONE read. ref -> model, absent and unreadable ones left out."""
    cache, wanted = cache_of(conn), {r for r in refs if r}
    bodies = {ref: cached[1] for ref in wanted if (cached := cache.get(tenant_id, ref)) is not None}
    missing = sorted(wanted - set(bodies))
    for row in (await conn.execute(_ARTIFACTS, {"k_tenant": tenant_id, "k_refs": missing})) if missing else ():
        bodies[row.ref] = bytes(row.body)
        remember(conn, ArtifactRef(tenant_id=row.tenant_id, ref=row.ref, media_type=row.media_type, size=row.size,
                                   created_at=row.created_at), bodies[row.ref])
    parsed = ((ref, _parsed(body, model)) for ref, body in bodies.items())
    return {ref: m for ref, m in parsed if m is not None}


def _parsed(body: bytes, model: type[M]) -> M | None:
    try:
        return model.model_validate_json(body)
    except ValidationError:
        return None


async def store_json(
    conn: AsyncConnection, tenant_id: str, body: bytes, *, config: WorkflowConfig, at: datetime,
) -> ArtifactRef:
    return await put_artifact(conn, tenant_id, body, media_type="application/json",
                              max_bytes=config.artifact_max_bytes, at=at, read_back=False)


async def incident_version(conn: AsyncConnection, run: Run) -> int:
    """The incident's newest version this run knows and its approval binds to: at acceptance, in
    drafts, or delivered since; of coalesced updates only those that changed the draft's substance
    (another alert of a known name leaves the approval standing)."""
    return await version_with_draft(conn, run, await records.current_draft(conn, run.tenant_id, run.run_id))


async def version_with_draft(conn: AsyncConnection, run: Run, draft: records.DraftRecord | None) -> int:
    """:func:`incident_version` for a caller that read the run's current ``draft`` in this
    transaction already (one read fewer on the approval's hot path)."""
    rows = await conn.execute(_VERSION_EVENTS, {"k_tenant": run.tenant_id, "k_run": run.run_id})
    return version_of(run, draft, ((r.type, r.data) for r in rows))


def version_of(run: Run, draft: records.DraftRecord | None, logged: Iterable[tuple[str, Mapping[str, Any]]]) -> int:
    """The incident version from the run's binding, its current ``draft`` and its ``logged``
    events of :data:`VERSION_EVENT_TYPES` (type, data)."""
    known = [int(run.bindings.get("incident_version", 0))]
    if draft is not None:
        known.append(draft.incident_version)
    known += [int(data.get("incident_version", 0)) for type_, data in logged
              if type_ == ALERT_DELIVERED or data.get("substantive")]
    return max(known)


VERSION_EVENT_TYPES = (ALERT_DELIVERED, INCIDENT_UPDATED)
"""The events that can move the incident version an approval binds to."""
_VERSION_EVENTS = select(events.c.type, events.c.data).where(
    events.c.tenant_id == bindparam("k_tenant"), events.c.run_id == bindparam("k_run"),
    events.c.type.in_(VERSION_EVENT_TYPES))
"""Built once (see ira/runtime/store/steps.py on why hot statements are)."""


async def has_event(conn: AsyncConnection, run: Run, event_type: RunEventType) -> bool:
    """Whether the run's log holds an event of ``event_type``."""
    row = (await conn.execute(select(events.c.run_seq).where(
        events.c.tenant_id == run.tenant_id, events.c.run_id == run.run_id, events.c.type == event_type)
        .limit(1))).first()
    return row is not None


async def charge_step(conn: AsyncConnection, claim: Claim, *, config: WorkflowConfig, at: datetime) -> None:
    """One ``steps`` unit from the root, once per claim, written by the run's next commit in this
    transaction (on PostgreSQL in its compare-and-set, ``budget.charge_with_commit``: a round trip
    fewer per step, and the root's row locked after the run's), which raises BudgetExhaustedError
    when none is left. For a step whose every path from here commits the run, or raises, before
    anything leaves the transaction (every coordinator step)."""
    if BudgetDimension.STEPS not in config.root_budget:
        return
    rid = f"step:{claim.run_id}:{claim.step_id}:{claim.owner_epoch}"  # reservation ids are unique per tenant
    await budget.charge_with_commit(conn, claim.tenant_id, claim.run_id, BudgetDimension.STEPS, 1,
                                    reservation_id=rid, at=at)
