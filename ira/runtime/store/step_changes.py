"""The step part of a run commit: the fence, the step UPDATEs, and the promotions they cause.

A commit fenced by a claim usually finishes that same step; its fence is then checked by the
step's own conditional UPDATE (``owner_epoch = :epoch`` in its WHERE), run before the
compare-and-set of the run as the separate ``SELECT .. FOR UPDATE`` of the epoch was: the row
lock that UPDATE takes holds until commit, so a newer claim still cannot slip in before it,
and a refused UPDATE reads the step once to say why (stale epoch first, as before).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from functools import cache

from sqlalchemy import and_, bindparam, select, update
from sqlalchemy.ext.asyncio import AsyncConnection
from sqlalchemy.sql import Update

from ira.core.commit import EventDraft, Fence, RunCommit, StepChange
from ira.core.errors import ConcurrentUpdateError, StaleEpochError
from ira.core.events import RunEventType
from ira.core.plan import newly_ready
from ira.core.states import FINISHED_STEP_STATES, STEP_TRANSITIONS, StepState, check_step_transition
from ira.runtime.store.rows import step_from_row
from ira.runtime.store.schema import runs, steps
from ira.runtime.store.steps import _STEP_KEY, _key_params, check_fence, get_step
from ira.runtime.wakeup import step_wakeup

_PLAN_AND_ENVIRONMENT = select(steps, runs.c.environment).join(runs, and_(
    runs.c.tenant_id == steps.c.tenant_id, runs.c.run_id == steps.c.run_id)).where(
    steps.c.tenant_id == bindparam("k_tenant"), steps.c.run_id == bindparam("k_run")).order_by(steps.c.step_id)
"""The plan with the run's environment (what a wake-up carries): one read instead of two."""


@cache
def _sources_of(target: StepState) -> list[StepState]:
    return [s for s, nxt in STEP_TRANSITIONS.items() if target in nxt]


@cache
def _step_change_statement(with_result_ref: bool, release_claim: bool, with_depends_on: bool,
                           fenced: bool = False) -> Update:
    """The conditional UPDATE of one StepChange, one prebuilt statement per shape of change."""
    values: dict[str, object] = {"state": bindparam("new_state"), "updated_at": bindparam("now")}
    if with_result_ref:
        values["result_ref"] = bindparam("new_result_ref")
    if release_claim:
        values.update(owner=None, lease_until=None)
    if with_depends_on:
        values["depends_on"] = bindparam("new_depends_on", type_=steps.c.depends_on.type)
    where = [_STEP_KEY, steps.c.state.in_(bindparam("sources", expanding=True))]
    if fenced:
        where.append(steps.c.owner_epoch == bindparam("k_epoch"))
    return update(steps).where(*where).values(**values)


async def apply_fenced(conn: AsyncConnection, change: RunCommit, *, at: datetime) -> RunCommit:
    """Check ``change``'s fence and apply the fenced step's own changes; return the rest.

    Called before the run's compare-and-set, where the fence was always checked.
    """
    fence = change.fence
    if fence is None:
        return change
    mine = [s for s in change.steps if s.step_id == fence.step_id]
    if not mine:
        await check_fence(conn, change.tenant_id, change.run_id, fence)
        return change
    await _apply_one(conn, change.tenant_id, change.run_id, mine[0], at=at, fence=fence)
    for step_change in mine[1:]:
        await _apply_one(conn, change.tenant_id, change.run_id, step_change, at=at)
    return change.model_copy(update={"steps": tuple(s for s in change.steps if s.step_id != fence.step_id)})


async def with_promotions(conn: AsyncConnection, change: RunCommit, finishing: dict[str, StepState], *,
                          at: datetime) -> RunCommit:
    """Add to ``change`` the BLOCKED steps that ``finishing`` (the commit's step states) makes
    ready: state, event and wake-up, same commit.

    Doing it inside the commit (not in a later message) means a READY step is always in SQL,
    where the scanner can find it if its wake-up is lost.
    """
    if not any(state in FINISHED_STEP_STATES for state in finishing.values()):
        return change
    rows = (await conn.execute(_PLAN_AND_ENVIRONMENT, {"k_tenant": change.tenant_id, "k_run": change.run_id})).all()
    ready = newly_ready([step_from_row(r) for r in rows], finishing)
    if not ready:
        return change
    environment = rows[0].environment
    return change.model_copy(update={
        "steps": (*change.steps, *(StepChange(step_id=s.step_id, state=StepState.READY) for s in ready)),
        "events": (*change.events, *(EventDraft(type=RunEventType.STEP_READY,
            data={"step_id": s.step_id}) for s in ready)),
        "outbox": (*change.outbox, *(step_wakeup(change.tenant_id, change.run_id, s.step_id, kind=s.kind,
                                                 environment=environment, at=at) for s in ready)),
    })


async def apply_step_changes(conn: AsyncConnection, tenant_id: str, run_id: str, changes: Sequence[StepChange], *,
                             at: datetime) -> None:
    for step_change in changes:
        await _apply_one(conn, tenant_id, run_id, step_change, at=at)


async def _apply_one(conn: AsyncConnection, tenant_id: str, run_id: str, change: StepChange, *, at: datetime,
                     fence: Fence | None = None) -> None:
    """One conditional UPDATE; only a refusal reads the step, to raise the precise error."""
    params: dict[str, object] = {**_key_params(tenant_id, run_id, change.step_id), "new_state": change.state,
                                 "now": at, "sources": _sources_of(change.state)}
    if change.result_ref is not None:
        params["new_result_ref"] = change.result_ref
    if change.depends_on is not None:
        params["new_depends_on"] = list(change.depends_on)
    if fence is not None:
        params["k_epoch"] = fence.owner_epoch
    statement = _step_change_statement(change.result_ref is not None, change.release_claim,
                                       change.depends_on is not None, fence is not None)
    result = await conn.execute(statement, params)
    if result.rowcount != 1:
        current = await get_step(conn, tenant_id, run_id, change.step_id)
        if fence is not None and current.owner_epoch != fence.owner_epoch:
            raise StaleEpochError(f"step {run_id}/{change.step_id} is at epoch {current.owner_epoch}, "
                                  f"writer has {fence.owner_epoch}")
        check_step_transition(current.state, change.state)
        raise ConcurrentUpdateError(f"step {run_id}/{change.step_id} changed concurrently")
