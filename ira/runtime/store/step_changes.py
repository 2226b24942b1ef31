"""The step part of a run commit: the fence, the step UPDATEs, and the promotions they cause.

A commit fenced by a claim usually finishes that same step; its fence is then checked by the
step's own conditional UPDATE (``owner_epoch = :epoch`` in its WHERE), run before the
compare-and-set of the run as the separate ``SELECT .. FOR UPDATE`` of the epoch was: the row
lock that UPDATE takes holds until commit, so a newer claim still cannot slip in before it,
and a refused UPDATE reads the step once to say why (stale epoch first, as before).

On PostgreSQL that UPDATE also ends the running attempt it finishes (``steps.attempt_ended_by``)
when the commit is the attempt's own: the attempts UPDATE rides in it as a data-modifying CTE
that writes only if the step's UPDATE took its row, so a refused fence ends nothing, and the
whole transaction still rolls back on any later refusal (the run's compare-and-set). When the
commit finishes a step, that statement also reads the run's plan for the promotions (as of the
statement's start: the commit's own step states override it in ``newly_ready``, and the plan is
still read after the caller read the run's version, which the compare-and-set checks).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from functools import cache
from typing import Any

from sqlalchemy import String, and_, any_, bindparam, cast, exists, func, or_, select, update
from sqlalchemy.dialects import postgresql
from sqlalchemy.ext.asyncio import AsyncConnection
from sqlalchemy.sql import Select, Update

from ira.core.commit import EventDraft, Fence, RunCommit, StepChange
from ira.core.errors import ConcurrentUpdateError, StaleEpochError
from ira.core.events import RunEventType
from ira.core.plan import newly_ready
from ira.core.states import (
    FINISHED_STEP_STATES,
    STEP_TRANSITIONS,
    TERMINAL_RUN_STATES,
    StepState,
    check_step_transition,
)
from ira.runtime.store.database import tells_commit
from ira.runtime.store.schema import attempts, runs, steps
from ira.runtime.store.steps import (
    RUN_KEY,
    RUN_LOCKED,
    STEP_KEY,
    RunningAttempt,
    attempt_ended_by,
    check_fence,
    get_step,
    step_key_params,
)
from ira.runtime.wakeup import step_wakeup

_PLAN_AND_ENVIRONMENT = select(steps.c.step_id, steps.c.kind, steps.c.state, steps.c.depends_on,
                               runs.c.environment).join(runs, and_(
    runs.c.tenant_id == steps.c.tenant_id, runs.c.run_id == steps.c.run_id)).where(
    steps.c.tenant_id == bindparam("k_tenant"), steps.c.run_id == bindparam("k_run")).order_by(steps.c.step_id)
"""The plan with the run's environment (what a wake-up carries): one read instead of two. Only
what ``newly_ready`` and a wake-up read: each finishing commit reads it, and building a whole
``Step`` per row (its JSON binding decoded, a model validated) was most of that read's CPU."""

_FINISHING = bindparam("k_finishing", type_=postgresql.ARRAY(String))
_waiting = steps.alias("waiting")
_WAITS_ON_FINISHING = and_(
    _waiting.c.tenant_id == bindparam("k_tenant"), _waiting.c.run_id == bindparam("k_run"),
    _waiting.c.state == StepState.BLOCKED, cast(_waiting.c.depends_on, postgresql.JSONB).has_any(_FINISHING))
_THAT_FINISHING_CAN_READY = or_(
    steps.c.step_id == bindparam("k_step"), steps.c.step_id == any_(_FINISHING),
    and_(steps.c.state == StepState.BLOCKED, cast(steps.c.depends_on, postgresql.JSONB).has_any(_FINISHING)),
    steps.c.step_id.in_(select(func.jsonb_array_elements_text(cast(_waiting.c.depends_on, postgresql.JSONB)))
                        .where(_WAITS_ON_FINISHING)))
"""PostgreSQL: the part of the plan a commit finishing ``k_finishing`` can ready steps in: the
BLOCKED steps that wait on one of them, every step those wait on, and the commit's own steps.
A BLOCKED step is readied by the commit that finishes the last of its dependencies, and no
other commit changes whether it is ready; reading the whole plan made a run's steps each read
all of its steps (a chain of N, N^2/2 rows decoded)."""


@cache
def sources_of(target: StepState) -> list[StepState]:
    """States a step may be in for ``target`` to be legal (a change's conditional UPDATE)."""
    return [s for s, nxt in STEP_TRANSITIONS.items() if target in nxt]


@cache
def _step_change_statement(with_result_ref: bool, release_claim: bool, with_depends_on: bool,
                           fenced: bool, target: StepState) -> Update:
    """The conditional UPDATE of one StepChange, one prebuilt statement per shape of change and
    target state. The legal sources are the statement's own ``IN`` list, not a parameter: a list
    the caller passes changes the SQL per execution, which sends every execution through
    SQLAlchemy's compile path (~100 µs of CPU each on SQLite, see sqlite_fast.py)."""
    values: dict[str, object] = {"state": bindparam("new_state"), "updated_at": bindparam("now")}
    if with_result_ref:
        values["result_ref"] = bindparam("new_result_ref")
    if release_claim:
        values.update(owner=None, lease_until=None)
    if with_depends_on:
        values["depends_on"] = bindparam("new_depends_on", type_=steps.c.depends_on.type)
    where = [STEP_KEY, steps.c.state.in_(sources_of(target))]
    if fenced:
        where.append(steps.c.owner_epoch == bindparam("k_epoch"))
    return update(steps).where(*where).values(**values)


_LOCKED_VERSION = select(RUN_LOCKED.c.state_version).scalar_subquery().label("locked_version")
_SNAPSHOT_VERSION = select(runs.c.state_version).where(RUN_KEY).scalar_subquery().label("snapshot_version")
"""The run's version in the statement's snapshot, taken before any wait for the run's row: where
it differs from ``_LOCKED_VERSION``, a writer committed after the snapshot, and the plan the
statement read is older than the run the commit applies on."""


@cache
def _fenced_change(with_result_ref: bool, release_claim: bool, with_depends_on: bool, target: StepState, ending: bool,
                   plan: bool) -> Select[Any]:
    """PostgreSQL: the fenced step's UPDATE as a data-modifying CTE, with what rides in it.

    The run's row is locked first (``RUN_LOCKED``), then the step's: the order of every writer
    that reads the run under lock before it writes (``lock_run``, a cancel), so a commit that
    decided on the run without locking it (the run its claim read, ``on_known_run``) or on
    nothing of it (no expected version: a branch's result) waits for such a writer instead of
    holding the step's row that writer will want next (a deadlock, found by PostgreSQL only
    after ``deadlock_timeout``). Where the transaction holds the lock already, taking it again
    costs the server a lookup.

    With ``plan``, each row also holds the run's version as the lock found it
    (``locked_version``) and as the statement's snapshot holds it (``snapshot_version``; see
    ``apply_fenced``).

    ``ending``: the end of its attempt, written only if the step's UPDATE took its row. ``plan``:
    the statement reads the run's plan for ``with_promotions`` (as it was before the statement:
    the commit's own step states override it there; only the part the commit's finishing steps
    can ready, ``_THAT_FINISHING_CAN_READY``, which holds the fenced step's own row), each row
    with ``took``; else one row comes back if the step's UPDATE took its row."""
    changed = _step_change_statement(with_result_ref, release_claim, with_depends_on, True, target) \
        .where(exists(select(RUN_LOCKED.c.run_id))).returning(steps.c.step_id).cte("changed")
    writes = [changed]
    if ending:
        writes.append(update(attempts).where(
            attempts.c.tenant_id == bindparam("k_tenant"), attempts.c.attempt_id == bindparam("k_attempt"),
            exists(select(changed.c.step_id)),
        ).values(ended_at=bindparam("now"), outcome="finished", error=None).cte("ended"))
    if plan:
        return _PLAN_AND_ENVIRONMENT.where(_THAT_FINISHING_CAN_READY) \
            .add_columns(exists(select(changed.c.step_id)).label("took"), _LOCKED_VERSION, _SNAPSHOT_VERSION) \
            .add_cte(*writes)
    return select(changed.c.step_id).add_cte(*writes[1:])


Plan = Sequence[Any]
"""The run's steps with its environment: ``_PLAN_AND_ENVIRONMENT``'s rows, or a plan this process
knows (``known_plans.PlanRow`` rows): each with ``step_id``, ``kind``, ``state``, ``depends_on``,
``environment``."""


async def apply_fenced(conn: AsyncConnection, change: RunCommit, *, at: datetime
                       ) -> tuple[RunCommit, bool, Plan | None]:
    """Check ``change``'s fence and apply the fenced step's own changes; return the rest,
    whether the attempt the commit finishes ended here (PostgreSQL: in the step's UPDATE), and
    the run's plan if that UPDATE read it for ``with_promotions`` (PostgreSQL, when the commit
    finishes a step: one statement fewer).

    PostgreSQL reads that plan in the statement's snapshot, taken before the statement waited
    for the run's row: a commit with an expected version finds a writer that committed in the
    meantime by its compare-and-set (refused, the version moved), but one without (applied on
    whatever version it finds, ``RunCommit``) would not. So for such a commit, where the lock
    found a newer version than the snapshot, no plan is returned, and ``with_promotions`` reads
    it in a statement of its own, whose snapshot follows the lock (the last two branches of a
    join finishing at once would each see the other still running, and neither would ready the
    join).

    Called before the run's compare-and-set, where the fence was always checked.
    """
    fence = change.fence
    if fence is None:
        return change, False, None
    mine = [s for s in change.steps if s.step_id == fence.step_id]
    if not mine:
        await check_fence(conn, change.tenant_id, change.run_id, fence)
        return change, False, None
    ending = foldable_attempt(conn, change, len(mine))
    read_plan = conn.dialect.name == "postgresql" and _finishes(change.steps)
    finishing = [c.step_id for c in change.steps if c.state in FINISHED_STEP_STATES] if read_plan else None
    plan = await _apply_one(conn, change.tenant_id, change.run_id, mine[0], at=at, fence=fence, ending=ending,
                            read_plan=finishing)
    for step_change in mine[1:]:
        await _apply_one(conn, change.tenant_id, change.run_id, step_change, at=at)
    if ending is not None:
        ending.end_with(conn)
    if change.expected_version is None and plan and plan[0].snapshot_version != plan[0].locked_version:
        plan = None  # older than the run the commit applies on (docstring)
    rest = change.model_copy(update={"steps": tuple(s for s in change.steps if s.step_id != fence.step_id)})
    return rest, ending is not None, plan


def _finishes(changes: Sequence[StepChange]) -> bool:
    return any(c.state in FINISHED_STEP_STATES for c in changes)


def foldable_attempt(conn: AsyncConnection, change: RunCommit, changes_of_fenced: int) -> RunningAttempt | None:
    """The attempt the fenced step's UPDATE may end in the same statement: PostgreSQL only (no
    data-modifying CTEs in SQLite), one change of that step, a transaction that tells its commit."""
    if conn.dialect.name != "postgresql" or changes_of_fenced != 1 or not tells_commit(conn):
        return None
    return attempt_ended_by(change)


async def with_promotions(conn: AsyncConnection, change: RunCommit, finishing: dict[str, StepState], *,
                          at: datetime, plan: Plan | None = None) -> RunCommit:
    """Add to ``change`` the BLOCKED steps that ``finishing`` (the commit's step states) makes
    ready: state, event and wake-up, same commit. ``plan``: the run's plan, read already in this
    transaction (by ``apply_fenced``).

    Doing it inside the commit (not in a later message) means a READY step is always in SQL,
    where the scanner can find it if its wake-up is lost.
    """
    if change.state in TERMINAL_RUN_STATES or not any(state in FINISHED_STEP_STATES for state in finishing.values()):
        return change  # an ended run readies nothing: no step of it can be claimed any more
    rows = plan if plan is not None else (await conn.execute(
        _PLAN_AND_ENVIRONMENT, {"k_tenant": change.tenant_id, "k_run": change.run_id})).all()
    ready = newly_ready(rows, finishing)
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


async def refuse_unapplied(conn: AsyncConnection, tenant_id: str, run_id: str, changes: Sequence[StepChange],
                           applied: Sequence[str]) -> None:
    """Raise for the first of ``changes`` (applied together, ``folded_cas``) whose step is not
    in ``applied``: the error its own conditional UPDATE would have raised."""
    done = set(applied)
    for change in changes:
        if change.step_id not in done:
            await explain_step_refusal(conn, tenant_id, run_id, change, None)


async def _apply_one(conn: AsyncConnection, tenant_id: str, run_id: str, change: StepChange, *, at: datetime,
                     fence: Fence | None = None, ending: RunningAttempt | None = None,
                     read_plan: Sequence[str] | None = None) -> Plan | None:
    """One conditional UPDATE (fenced, PostgreSQL: with ``ending``, the attempt's end; with
    ``read_plan``, the ids of the commit's finishing steps, the part of the run's plan they can
    ready, returned; both in the same statement); only a refusal reads the step, to raise the
    precise error."""
    params: dict[str, object] = {**step_key_params(tenant_id, run_id, change.step_id), "new_state": change.state,
                                 "now": at}
    if change.result_ref is not None:
        params["new_result_ref"] = change.result_ref
    if change.depends_on is not None:
        params["new_depends_on"] = list(change.depends_on)
    if fence is not None:
        params["k_epoch"] = fence.owner_epoch
    shape = (change.result_ref is not None, change.release_claim, change.depends_on is not None)
    plan: Plan | None = None
    if ending is None and read_plan is None and (fence is None or conn.dialect.name != "postgresql"):
        done = (await conn.execute(_step_change_statement(*shape, fence is not None, change.state), params)
                ).rowcount == 1
    else:
        if ending is not None:
            params["k_attempt"] = ending.claim.attempt_id
        if read_plan is not None:
            params["k_finishing"] = list(read_plan)
        reading = read_plan is not None
        rows = (await conn.execute(_fenced_change(*shape, change.state, ending is not None, reading), params)).all()
        done = bool(rows) and (rows[0].took if reading else True)
        plan = rows if reading else None
    if not done:
        await explain_step_refusal(conn, tenant_id, run_id, change, fence)
    return plan


async def explain_step_refusal(conn: AsyncConnection, tenant_id: str, run_id: str, change: StepChange,
                               fence: Fence | None) -> None:
    """Raise why ``change``'s conditional UPDATE wrote nothing: a stale epoch, an illegal
    transition, or a concurrent change."""
    current = await get_step(conn, tenant_id, run_id, change.step_id)
    if fence is not None and current.owner_epoch != fence.owner_epoch:
        raise StaleEpochError(f"step {run_id}/{change.step_id} is at epoch {current.owner_epoch}, "
                              f"writer has {fence.owner_epoch}")
    check_step_transition(current.state, change.state)
    raise ConcurrentUpdateError(f"step {run_id}/{change.step_id} changed concurrently")
