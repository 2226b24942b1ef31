"""The statements of a durable step, built once and run natively (see :mod:`native`).

Building a SQLAlchemy statement (coercing every operand) and deriving its cache key took
~1.4 ms for the claim UPDATE on this machine, more than executing it; executing it through
SQLAlchemy another ~250 µs. Here each is built once, compiled once per dialect, and every
UPDATE returns a column, so "how many rows" is the length of what came back on both drivers.
"""

from __future__ import annotations

from collections.abc import Iterable
from functools import cache

from sqlalchemy import and_, bindparam, exists, false, insert, or_, select, update
from sqlalchemy.sql import ColumnElement

from ira.core.states import STEP_TRANSITIONS, RunState, StepState
from ira.runtime.store.native import NativeStatement
from ira.runtime.store.schema import attempts, runs, steps

#: Runs in these states accept new claims; WAITING/PAUSED/terminal runs hand out no work.
CLAIMABLE_RUN_STATES = (RunState.PENDING, RunState.RUNNING)


def one_of(column: ColumnElement[str], values: Iterable[str]) -> ColumnElement[bool]:
    """``column IN (...)`` spelled as ORs of plain binds: SQLAlchemy renders ``in_()`` as an
    expanding parameter, which a statement compiled once for the driver cannot carry."""
    return or_(false(), *(column == value for value in values))


def claimable(now: object) -> ColumnElement[bool]:
    """READY with no live lease, or RUNNING with an expired one, in a run that hands out work."""
    lease_free = or_(steps.c.lease_until.is_(None), steps.c.lease_until < now)
    run_open = exists().where(
        runs.c.tenant_id == steps.c.tenant_id, runs.c.run_id == steps.c.run_id,
        one_of(runs.c.state, CLAIMABLE_RUN_STATES))
    ready = and_(steps.c.state == StepState.READY, lease_free)
    abandoned = and_(steps.c.state == StepState.RUNNING, steps.c.lease_until < now)
    return and_(or_(ready, abandoned), run_open)


def key_params(tenant_id: str, run_id: str, step_id: str) -> dict[str, object]:
    return {"k_tenant": tenant_id, "k_run": run_id, "k_step": step_id}


STEP_KEY = and_(steps.c.tenant_id == bindparam("k_tenant"), steps.c.run_id == bindparam("k_run"),
                steps.c.step_id == bindparam("k_step"))
_HELD = and_(STEP_KEY, steps.c.owner_epoch == bindparam("k_epoch"), steps.c.state == StepState.RUNNING)

SELECT_STEP = NativeStatement(select(steps).where(STEP_KEY))
SELECT_PLAN = NativeStatement(select(steps).where(
    steps.c.tenant_id == bindparam("k_tenant"), steps.c.run_id == bindparam("k_run")).order_by(steps.c.step_id))
INSERT_STEPS = NativeStatement(insert(steps).values({c.key: bindparam(c.key) for c in steps.c if c.key != "woken_at"}))
CLAIM = NativeStatement(
    update(steps).where(STEP_KEY, claimable(bindparam("now")))
    .values(owner=bindparam("new_owner"), lease_until=bindparam("new_lease_until"),
            owner_epoch=steps.c.owner_epoch + 1, state=StepState.RUNNING, updated_at=bindparam("now"))
    .returning(steps.c.owner_epoch))
INSERT_ATTEMPT = NativeStatement(insert(attempts).values({c: bindparam(c) for c in (
    "tenant_id", "attempt_id", "run_id", "step_id", "owner", "owner_epoch", "started_at", "usage")}))
HEARTBEAT = NativeStatement(
    update(steps).where(_HELD).values(lease_until=bindparam("new_lease_until"), updated_at=bindparam("now"))
    .returning(steps.c.owner_epoch))
RELEASE = NativeStatement(
    update(steps).where(_HELD).values(state=StepState.READY, owner=None, lease_until=None, updated_at=bindparam("now"))
    .returning(steps.c.owner_epoch))
LOCK_EPOCH = NativeStatement(select(steps.c.owner_epoch).where(STEP_KEY).with_for_update())
SELECT_ENVIRONMENT = NativeStatement(select(runs.c.environment).where(
    runs.c.tenant_id == bindparam("k_tenant"), runs.c.run_id == bindparam("k_run")))


@cache
def end_attempt_statement(with_usage: bool) -> NativeStatement:
    values: dict[str, object] = {"ended_at": bindparam("new_ended_at"), "outcome": bindparam("new_outcome"),
                                 "error": bindparam("new_error")}
    if with_usage:
        values["usage"] = bindparam("new_usage", type_=attempts.c.usage.type)
    return NativeStatement(update(attempts).where(
        attempts.c.tenant_id == bindparam("k_tenant"), attempts.c.attempt_id == bindparam("k_attempt"))
        .values(**values))


@cache
def step_change_statement(target: StepState, *, with_result_ref: bool, release_claim: bool,
                          with_depends_on: bool) -> NativeStatement:
    """The conditional UPDATE of one StepChange: one statement per target state and shape."""
    sources = [s for s, nxt in STEP_TRANSITIONS.items() if target in nxt]
    values: dict[str, object] = {"state": target, "updated_at": bindparam("now")}
    if with_result_ref:
        values["result_ref"] = bindparam("new_result_ref")
    if release_claim:
        values.update(owner=None, lease_until=None)
    if with_depends_on:
        values["depends_on"] = bindparam("new_depends_on", type_=steps.c.depends_on.type)
    return NativeStatement(update(steps).where(STEP_KEY, one_of(steps.c.state, sources)).values(**values)
                           .returning(steps.c.step_id))
