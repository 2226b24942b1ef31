"""Steps: claims, leases and fencing (C3); the step part of a run commit is step_changes.py.

A claim is one conditional UPDATE: only a READY step whose lease is free or expired, or a
RUNNING step whose owner's lease ran out, can be taken; taking it bumps ``owner_epoch``.
Every later write by that owner names the epoch, and the store refuses lower ones.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import cache
from typing import Any

from sqlalchemy import and_, bindparam, exists, insert, literal, or_, select, update
from sqlalchemy.ext.asyncio import AsyncConnection
from sqlalchemy.sql import Update

from ira.core.commit import Fence, NewRun, NewStep, RunCommit
from ira.core.errors import NotFoundError, StaleEpochError
from ira.core.ids import new_id
from ira.core.run import Claim, Step
from ira.core.states import RunState, StepState
from ira.runtime.store.database import after_commit
from ira.runtime.store.pg_fast import write_later
from ira.runtime.store.rows import step_from_row
from ira.runtime.store.schema import attempts, runs, steps

#: Runs in these states accept new claims; WAITING/PAUSED/terminal runs hand out no work.
CLAIMABLE_RUN_STATES = (RunState.PENDING, RunState.RUNNING)


def _key(tenant_id: str, run_id: str, step_id: str):  # type: ignore[no-untyped-def]
    return and_(steps.c.tenant_id == tenant_id, steps.c.run_id == run_id, steps.c.step_id == step_id)


# The statements every step runs are built once, with bound parameters. Building a SQLAlchemy
# statement (coercing every operand) and deriving its cache key took ~1.4 ms for the claim
# UPDATE on this machine, more than executing it; a prebuilt statement memoizes its cache key.
STEP_KEY = and_(steps.c.tenant_id == bindparam("k_tenant"), steps.c.run_id == bindparam("k_run"),
                steps.c.step_id == bindparam("k_step"))
RUN_KEY = and_(runs.c.tenant_id == bindparam("k_tenant"), runs.c.run_id == bindparam("k_run"))
RUN_LOCKED = select(runs.c.run_id, runs.c.state, runs.c.state_version).where(RUN_KEY).with_for_update() \
    .cte("run_locked")
"""The run's row, locked, as a CTE: a statement whose WHERE reads it (a one-time filter) takes the
run's row before any row of its own, the order of every writer that reads the run under lock
(``lock_run``, a cancel). A row locked after a wait is read as that writer left it."""
_SELECT_STEP = select(steps).where(STEP_KEY)
_SELECT_PLAN = select(steps).where(steps.c.tenant_id == bindparam("k_tenant"), steps.c.run_id == bindparam("k_run")) \
    .order_by(steps.c.step_id)
_INSERT_ATTEMPT = insert(attempts)
_INSERT_STEPS = insert(steps)


def step_key_params(tenant_id: str, run_id: str, step_id: str) -> dict[str, object]:
    return {"k_tenant": tenant_id, "k_run": run_id, "k_step": step_id}


async def insert_steps(conn: AsyncConnection, new: NewRun, *, at: datetime,
                       claims: Mapping[str, Claim] | None = None) -> dict[str, Step]:
    """The plan of a new run; ``claims`` (``claimed_inserts.claims_at_insert``, by step id): steps inserted
    claimed. Returns those steps as inserted, by step id."""
    return await add_steps(conn, new.tenant_id, new.run_id, new.steps, at=at, claims=claims)


async def add_steps(conn: AsyncConnection, tenant_id: str, run_id: str, new_steps: Sequence[NewStep], *,
                    at: datetime, claims: Mapping[str, Claim] | None = None) -> dict[str, Step]:
    """Insert steps into a run's plan: the plan at creation, or steps a person added later.

    A step in ``claims`` (a READY step of a new run that this process runs itself) goes in as
    the claim's UPDATE would leave it: RUNNING, owned, leased, epoch 1, its attempt started;
    the same values, written once instead of inserted READY and updated in the same
    transaction. Returns those steps, by step id."""
    if not new_steps:
        return {}
    rows = [{"tenant_id": tenant_id, "run_id": run_id, "step_id": s.step_id, "kind": s.kind,
             "state": s.state, "depends_on": list(s.depends_on), "required": s.required, "owner": None,
             "owner_epoch": 0, "lease_until": None, "binding": s.binding, "result_ref": None, "updated_at": at}
            for s in new_steps]
    claimed: dict[str, Step] = {}
    if claims:
        for row in rows:
            claim = claims.get(str(row["step_id"]))
            if claim is not None:
                row.update(state=StepState.RUNNING, owner=claim.owner, owner_epoch=claim.owner_epoch,
                           lease_until=claim.lease_until)
                claimed[claim.step_id] = Step.model_validate(row)
    await write_later(conn, _INSERT_STEPS, rows)
    if claims:
        await write_later(conn, _INSERT_ATTEMPT, [
            {"tenant_id": c.tenant_id, "attempt_id": c.attempt_id, "run_id": c.run_id, "step_id": c.step_id,
             "owner": c.owner, "owner_epoch": c.owner_epoch, "started_at": at, "usage": {}} for c in claims.values()])
    return claimed


async def get_step(conn: AsyncConnection, tenant_id: str, run_id: str, step_id: str) -> Step:
    row = (await conn.execute(_SELECT_STEP, step_key_params(tenant_id, run_id, step_id))).first()
    if row is None:
        raise NotFoundError(f"step {run_id}/{step_id} not found")
    return step_from_row(row)


async def list_steps(conn: AsyncConnection, tenant_id: str, run_id: str) -> list[Step]:
    result = await conn.execute(_SELECT_PLAN, {"k_tenant": tenant_id, "k_run": run_id})
    return [step_from_row(r) for r in result]


def _claimable(now: Any):  # type: ignore[no-untyped-def]
    lease_free = or_(steps.c.lease_until.is_(None), steps.c.lease_until < now)
    run_open = exists().where(
        runs.c.tenant_id == steps.c.tenant_id, runs.c.run_id == steps.c.run_id,
        runs.c.state.in_(CLAIMABLE_RUN_STATES))
    ready = and_(steps.c.state == StepState.READY, lease_free)
    abandoned = and_(steps.c.state == StepState.RUNNING, steps.c.lease_until < now)
    return and_(or_(ready, abandoned), run_open)


_CLAIM = (update(steps).where(STEP_KEY, _claimable(bindparam("now")))
          .values(owner=bindparam("new_owner"), lease_until=bindparam("new_lease_until"),
                  owner_epoch=steps.c.owner_epoch + 1, state=StepState.RUNNING, updated_at=bindparam("now"))
          .returning(*steps.c))
_claimed = _CLAIM.cte("claimed")
_CLAIM_AND_START = select(_claimed).add_cte(insert(attempts).from_select(
    ["tenant_id", "attempt_id", "run_id", "step_id", "owner", "owner_epoch", "started_at", "usage"],
    select(_claimed.c.tenant_id, bindparam("new_attempt", type_=attempts.c.attempt_id.type), _claimed.c.run_id,
           _claimed.c.step_id, _claimed.c.owner, _claimed.c.owner_epoch,
           bindparam("now", type_=attempts.c.started_at.type), literal({}, type_=attempts.c.usage.type)),
).cte("started"))
"""PostgreSQL's claim: the UPDATE and the attempt's INSERT in one statement, the step row out."""
_HELD = and_(STEP_KEY, steps.c.owner_epoch == bindparam("k_epoch"), steps.c.state == StepState.RUNNING)
_HEARTBEAT = update(steps).where(_HELD).values(lease_until=bindparam("new_lease_until"), updated_at=bindparam("now"))
_RELEASE = update(steps).where(_HELD).values(state=StepState.READY, owner=None, lease_until=None,
                                             updated_at=bindparam("now"))
_LOCK_EPOCH = select(steps.c.owner_epoch).where(STEP_KEY).with_for_update()
_LOCK_RUN_THEN_EPOCH = select(
    steps.c.owner_epoch, select(RUN_LOCKED.c.state).scalar_subquery().label("run_state"),
).where(STEP_KEY, exists(select(RUN_LOCKED.c.run_id))).with_for_update(of=steps)
"""``lock_fenced_run``'s one statement: the run's row locked first (``RUN_LOCKED``), then the
step's, both as their latest committed versions."""
_SELECT_ENVIRONMENT = select(runs.c.environment).where(RUN_KEY)


def _claim_params(claim: Claim) -> dict[str, object]:
    return {**step_key_params(claim.tenant_id, claim.run_id, claim.step_id), "k_epoch": claim.owner_epoch}


@cache
def _end_attempt_statement(with_usage: bool) -> Update:
    values: dict[str, object] = {"ended_at": bindparam("new_ended_at"), "outcome": bindparam("new_outcome"),
                                 "error": bindparam("new_error")}
    if with_usage:
        values["usage"] = bindparam("new_usage", type_=attempts.c.usage.type)
    return update(attempts).where(attempts.c.tenant_id == bindparam("k_tenant"),
                                  attempts.c.attempt_id == bindparam("k_attempt")).values(**values)


async def claim_step(
    conn: AsyncConnection, tenant_id: str, run_id: str, step_id: str, *, owner: str, lease: timedelta, now: datetime
) -> Claim | None:
    """Take the step if it is free; None if someone holds it, it is finished, or the run is closed."""
    claimed = await claim_step_as(conn, tenant_id, run_id, step_id, owner=owner, lease=lease, now=now)
    return claimed[0] if claimed else None


async def claim_step_as(
    conn: AsyncConnection, tenant_id: str, run_id: str, step_id: str, *, owner: str, lease: timedelta, now: datetime
) -> tuple[Claim, Step] | None:
    """``claim_step``, with the step as claimed: the claim's UPDATE returns its row. On
    PostgreSQL the attempt's INSERT rides in the same statement (a data-modifying CTE)."""
    lease_until, attempt_id = now + lease, new_id("att")
    params = {**step_key_params(tenant_id, run_id, step_id), "now": now, "new_owner": owner,
              "new_lease_until": lease_until}
    if conn.dialect.name == "postgresql":
        row = (await conn.execute(_CLAIM_AND_START, {**params, "new_attempt": attempt_id})).first()
    else:
        row = (await conn.execute(_CLAIM, params)).first()
        if row is not None:
            await conn.execute(_INSERT_ATTEMPT, {
                "tenant_id": tenant_id, "attempt_id": attempt_id, "run_id": run_id, "step_id": step_id,
                "owner": owner, "owner_epoch": row.owner_epoch, "started_at": now, "usage": {}})
    if row is None:
        return None
    claim = Claim(tenant_id=tenant_id, run_id=run_id, step_id=step_id, owner=owner, owner_epoch=int(row.owner_epoch),
                  lease_until=lease_until, attempt_id=attempt_id)
    return claim, step_from_row(row)


async def heartbeat(conn: AsyncConnection, claim: Claim, *, lease: timedelta, now: datetime) -> Claim:
    """Extend the lease; StaleEpochError if the step was taken over (the owner must stop)."""
    lease_until = now + lease
    result = await conn.execute(_HEARTBEAT, {**_claim_params(claim), "new_lease_until": lease_until, "now": now})
    if result.rowcount != 1:
        raise StaleEpochError(f"step {claim.run_id}/{claim.step_id} epoch {claim.owner_epoch} lost its lease")
    return claim.model_copy(update={"lease_until": lease_until})


async def release_step(conn: AsyncConnection, claim: Claim, *, now: datetime, error: str | None = None) -> None:
    """Give the step back unfinished (drain, crash handling): READY again, no owner, same epoch."""
    result = await conn.execute(_RELEASE, {**_claim_params(claim), "now": now})
    if result.rowcount != 1:
        raise StaleEpochError(f"step {claim.run_id}/{claim.step_id} epoch {claim.owner_epoch} is not ours to release")
    await end_attempt(conn, claim, outcome="released", now=now, error=error)


async def revoke_claim(conn: AsyncConnection, tenant_id: str, run_id: str, step_id: str, *, now: datetime) -> int:
    """Take the step from whoever holds it (deadline, cancel): epoch + 1, no owner, no lease.

    The state is left to the caller's commit. The old owner's next heartbeat or fenced
    commit then fails with StaleEpochError, which is how a running handler learns to stop.
    """
    epoch = (await conn.execute(
        update(steps).where(_key(tenant_id, run_id, step_id))
        .values(owner_epoch=steps.c.owner_epoch + 1, owner=None, lease_until=None, updated_at=now)
        .returning(steps.c.owner_epoch)
    )).scalar()
    if epoch is None:
        raise NotFoundError(f"step {run_id}/{step_id} not found")
    return int(epoch)


async def end_attempt(
    conn: AsyncConnection, claim: Claim, *, outcome: str, now: datetime,
    error: str | None = None, usage: dict[str, int] | None = None,
) -> None:
    values: dict[str, object] = {"k_tenant": claim.tenant_id, "k_attempt": claim.attempt_id, "new_ended_at": now,
                                 "new_outcome": outcome, "new_error": error}
    if usage is not None:
        values["new_usage"] = usage
    await conn.execute(_end_attempt_statement(usage is not None), values)


@dataclass
class RunningAttempt:
    """The attempt the current task runs (set by the dispatcher around a handler)."""

    claim: Claim
    ended: bool = False
    """A commit of this attempt took its step out of RUNNING and ended the attempt with it."""
    ending: bool = False
    """The transaction running now does that (``ended`` once it committed)."""

    def end_with(self, conn: AsyncConnection) -> bool:
        """The attempt ends with ``conn``'s transaction: ``ended`` once it committed. False where
        that transaction cannot tell its commit (then nothing is recorded)."""
        self.ending = after_commit(conn, self._ended)
        return self.ending

    def _ended(self) -> None:
        self.ended = True


RUNNING_ATTEMPT: ContextVar[RunningAttempt | None] = ContextVar("ira_running_attempt", default=None)


@contextmanager
def running_attempt(claim: Claim) -> Iterator[RunningAttempt]:
    """This task runs ``claim``'s attempt while the block runs, as the dispatcher sets it around
    a handler: for a step finished in the transaction that claimed it (``intake.run_here``),
    whose fenced commit then ends the attempt with it (:func:`end_attempt_in_commit`)."""
    attempt = RunningAttempt(claim)
    token = RUNNING_ATTEMPT.set(attempt)
    try:
        yield attempt
    finally:
        RUNNING_ATTEMPT.reset(token)


async def end_attempt_in_commit(conn: AsyncConnection, change: RunCommit, *, at: datetime) -> None:
    """Fold the end of the running attempt into the handler's own fenced commit.

    When ``change`` is fenced by the claim of the attempt this task runs and moves that step
    out of RUNNING, the attempt ends ("finished") in this same transaction, and once the
    transaction committed the dispatcher skips the write transaction it would otherwise spend
    finding that out (``StepDispatcher._release_if_unfinished``). The fence checked the epoch
    in this transaction, so the step cannot be RUNNING under this claim afterwards: a later
    claim takes a higher epoch. A transaction that rolls back ends nothing and the dispatcher
    releases as before; a handler that records its own outcome later (the agents' "done",
    with usage) overwrites this one. On PostgreSQL the fenced step's UPDATE usually ended it
    already, in the same statement (``step_changes.apply_fenced``); this is the other path.
    """
    attempt = attempt_ended_by(change)
    if attempt is not None and attempt.end_with(conn):
        await end_attempt(conn, attempt.claim, outcome="finished", now=at)


def attempt_ended_by(change: RunCommit) -> RunningAttempt | None:
    """The attempt this task runs, if ``change`` is fenced by its claim and moves its step out
    of RUNNING (so the attempt ends with the commit); None otherwise."""
    attempt = RUNNING_ATTEMPT.get()
    fence = change.fence
    if attempt is None or attempt.ended or fence is None:
        return None
    c = attempt.claim
    if (change.tenant_id, change.run_id, fence.step_id, fence.owner_epoch) != (
            c.tenant_id, c.run_id, c.step_id, c.owner_epoch):
        return None
    states = [s.state for s in change.steps if s.step_id == c.step_id]
    if not states or states[-1] == StepState.RUNNING:
        return None
    return attempt


async def lock_fenced_run(conn: AsyncConnection, tenant_id: str, run_id: str, fence: Fence) -> RunState:
    """Lock the run's row, then the fenced step's; verify the epoch; return the run's state.

    For a transaction that writes to the run without a compare-and-set but must hold its step
    (an investigator's turn: its events, its budget): the run's row before the step's, the order
    of every writer that reads the run under lock (``lock_run``, a cancel) and of a fenced
    commit. Locking the step first (``check_fence``) and the run only when the events are
    appended waited for the run while holding the step, which a cancel holding the run waits
    for next: a deadlock, found by PostgreSQL only after ``deadlock_timeout``. One statement
    (SQLite: a read, the transaction holds the database's write lock)."""
    row = (await conn.execute(_LOCK_RUN_THEN_EPOCH, step_key_params(tenant_id, run_id, fence.step_id))).first()
    if row is None:
        raise NotFoundError(f"step {run_id}/{fence.step_id} or its run not found")
    if row.owner_epoch != fence.owner_epoch:
        raise StaleEpochError(f"step {run_id}/{fence.step_id} is at epoch {row.owner_epoch}, "
                              f"writer has {fence.owner_epoch}")
    return RunState(row.run_state)


async def check_fence(conn: AsyncConnection, tenant_id: str, run_id: str, fence: Fence) -> None:
    """Lock the fenced step and verify its epoch: a newer claim can't slip in before commit."""
    epoch = (await conn.execute(_LOCK_EPOCH, step_key_params(tenant_id, run_id, fence.step_id))).scalar()
    if epoch is None:
        raise NotFoundError(f"step {run_id}/{fence.step_id} not found")
    if epoch != fence.owner_epoch:
        raise StaleEpochError(f"step {run_id}/{fence.step_id} is at epoch {epoch}, writer has {fence.owner_epoch}")


async def find_wakeable(conn: AsyncConnection, *, now: datetime, quiet: timedelta, limit: int) -> list[Step]:
    """Steps the scanner should wake again: READY with no live claim and not woken lately,
    or RUNNING with an expired lease (its owner died)."""
    result = await conn.execute(_WAKEABLE, {"now": now, "quiet_since": now - quiet, "limit": limit})
    return [step_from_row(r) for r in result]


_QUIET_SINCE = bindparam("quiet_since", type_=steps.c.updated_at.type)
_WAKEABLE = select(steps).where(
    _claimable(bindparam("now")), or_(steps.c.woken_at.is_(None), steps.c.woken_at < _QUIET_SINCE),
    steps.c.updated_at < _QUIET_SINCE).order_by(steps.c.updated_at).limit(bindparam("limit"))
"""The scanner's poll, every pass, built once: on PostgreSQL only a statement that comes back
runs on a prepared statement (``pg_fast``); built per call it cost ~5x the CPU."""


async def mark_woken(conn: AsyncConnection, step: Step, *, now: datetime) -> None:
    await conn.execute(_MARK_WOKEN, {**step_key_params(step.tenant_id, step.run_id, step.step_id), "v_now": now})


_MARK_WOKEN = update(steps).where(STEP_KEY).values(woken_at=bindparam("v_now", type_=steps.c.woken_at.type))
"""Built once: the scanner marks every step it wakes (a burst's READY steps waiting for a slot)."""
