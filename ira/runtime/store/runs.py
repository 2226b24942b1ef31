"""Runs and their event log: C1 creation and the one-transaction compare-and-set commit.

``run_seq`` is allocated by the same UPDATE that checks ``state_version`` (``last_seq =
last_seq + n ... RETURNING``), so the row lock that serializes writers also serializes
numbering: no gaps, no duplicates, whatever the concurrency.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from functools import cache
from typing import Any, NoReturn

from opentelemetry.trace import SpanKind
from sqlalchemy import Integer, bindparam, insert, select, update
from sqlalchemy.engine import Row
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncConnection
from sqlalchemy.sql import Update

from ira.core.commit import EventDraft, Fence, NewRun, OutboxMessage, RunCommit, StepChange
from ira.core.errors import ConcurrentUpdateError, NotFoundError
from ira.core.ids import new_event_id
from ira.core.redact import Redactor
from ira.core.run import Claim, Run, RunEvent, Step
from ira.core.states import RUN_TRANSITIONS, RunState, check_run_transition
from ira.runtime import runtrace
from ira.runtime.store import budget, known_plans, run_traces
from ira.runtime.store.claimed_inserts import claims_at_insert, claims_at_promotion
from ira.runtime.store.database import must_not_commit, settle_taken, untake_written
from ira.runtime.store.folded_cas import (
    CLAIMED_,
    FENCED_TOOK,
    PROMOTED,
    event_params,
    fenced_params,
    fenced_shape,
    folded_bump,
    outbox_params,
    promotion_params,
)
from ira.runtime.store.outbox import INSERT_OUTBOX as _INSERT_OUTBOX
from ira.runtime.store.outbox import enqueue, outbox_rows
from ira.runtime.store.pg_fast import write_later
from ira.runtime.store.rows import event_from_row, run_from_row, step_from_mapping
from ira.runtime.store.schema import events, runs, tasks
from ira.runtime.store.step_changes import (
    apply_fenced,
    apply_step_changes,
    explain_step_refusal,
    foldable_attempt,
    refuse_unapplied,
    with_promotions,
)
from ira.runtime.store.steps import RUN_KEY, RunningAttempt, add_steps, end_attempt_in_commit, insert_steps

# Prebuilt statements: see steps.py on why the per-step ones are built once.
_SELECT_RUN = select(runs).where(RUN_KEY)
_BY_KEY = select(runs).where(runs.c.tenant_id == bindparam("k_tenant"), runs.c.idempotency_key == bindparam("k_key"))
_NUMBER_EVENTS = update(runs).where(RUN_KEY).values(last_seq=runs.c.last_seq + bindparam("n_events", type_=Integer)) \
    .returning(runs.c.last_seq)
"""Numbers ``n_events`` events appended without a state check (``append_events``)."""
_INSERT_EVENTS = insert(events)
_ENQUEUED_RUN = "ira_enqueued_run"


_INSERT_TASK = insert(tasks)
_INSERT_RUN = insert(runs)
"""Built once (see timers.py): the same statement object each run."""


async def create_run(conn: AsyncConnection, new: NewRun, *, at: datetime, key_checked: bool = False
                     ) -> tuple[Run, bool]:
    """C1: task, run, steps, first events and outbox in the caller's transaction.

    Returns ``(run, created)``; with an ``idempotency_key`` already used, the existing run
    comes back with ``created=False`` and nothing is written. ``key_checked``: the caller looked
    the key up in this transaction already (one read fewer); the unique key still refuses a twin.
    """
    lookup = new.idempotency_key and not key_checked
    if lookup and (existing := await _find_by_key(conn, new.tenant_id, str(new.idempotency_key))):
        return existing, False
    await write_later(conn, _INSERT_TASK, {"tenant_id": new.tenant_id, "task_id": new.task_id, "kind": new.task_kind,
                                      "subject_ref": new.subject_ref, "created_at": at})
    values = {
        "tenant_id": new.tenant_id, "run_id": new.run_id, "task_id": new.task_id, "workflow": new.workflow,
        "environment": new.environment, "state": new.state, "wait_kind": None, "state_version": 1,
        "last_seq": len(new.events), "incident_id": new.incident_id, "contract": new.contract,
        "bindings": new.bindings, "outcome": None, "idempotency_key": new.idempotency_key,
        "created_at": at, "updated_at": at, "traceparent": new.traceparent,
    }
    try:
        await conn.execute(_INSERT_RUN, values)
    except IntegrityError as exc:  # the transaction is spoiled; the caller retries and finds the run
        raise ConcurrentUpdateError(f"run for key {new.idempotency_key} created concurrently") from exc
    run = Run.model_validate({k: v for k, v in values.items() if k != "idempotency_key"})
    run_traces.remember(run)
    messages = runtrace.stamp(new.outbox, new.traceparent or runtrace.current_traceparent())
    # the wake-ups are taken before the steps go in, so the steps this process runs itself go
    # in claimed (``claimed_inserts``): no claim UPDATE of a row this transaction wrote
    rows, taken = outbox_rows(conn, messages, at=at) if messages else ([], {})
    claims, woken = claims_at_insert(conn, new, messages, taken)
    inserted = await insert_steps(conn, new, at=at, claims=claims)
    if conn.dialect.name == "postgresql":
        known_plans.created(conn, new.tenant_id, new.run_id, known_plans.of_new_run(1, new.environment, new.steps))
    await _append_events(conn, new.tenant_id, new.run_id, new.events, first_seq=1, at=at)
    if rows:
        await write_later(conn, _INSERT_OUTBOX, rows)
    if taken:
        claimed = {woken[step_id]: (claim, inserted[step_id], run) for step_id, claim in claims.items()}
        await _settle_as(conn, run, taken, claimed)
    return run, True


async def commit(conn: AsyncConnection, change: RunCommit, *, at: datetime) -> Run:
    """Apply one accepted change atomically, or raise and write nothing.

    The happy path is one conditional UPDATE (version, legal source state, next run_seq)
    plus the inserts; only a refused UPDATE pays for a read, to say why it was refused:
    IllegalTransitionError, ConcurrentUpdateError, or StaleEpochError from the fence.
    The caller's transaction rolls back on any of them. A change without an expected version
    applies on the version the run has when its fence takes the run's row (``RunCommit``).
    """
    attributes: dict[str, str | int] = {
        "db.system.name": conn.dialect.name, "db.operation.name": "cas_commit", "ira.run_id": change.run_id,
        "ira.events": len(change.events)}
    if change.expected_version is not None:
        attributes["ira.expected_version"] = change.expected_version
    with runtrace.tracer().start_as_current_span("cas commit", kind=SpanKind.CLIENT, attributes=attributes):
        return await _commit(conn, change, at=at)


async def _commit(conn: AsyncConnection, change: RunCommit, *, at: datetime) -> Run:
    folds = conn.dialect.name == "postgresql"
    known = await known_plans.take(conn, change.tenant_id, change.run_id) if folds else None
    carried = None
    if known is not None and _on_known(change, known):  # one statement (known_plans)
        carried = await budget.take_waiting(conn, change.tenant_id, change.run_id)
        run = await _apply(conn, change, at=at, carried=carried, known=known)
        if run is not None:
            return run
    run = await _apply(conn, change, at=at, carried=carried, base=known)
    assert run is not None  # only a commit on a known plan comes back refused
    return run


def _on_known(change: RunCommit, known: known_plans.KnownPlan) -> bool:
    """Whether ``change`` can apply on ``known`` in one statement: it expects the plan's version (or
    none), and its fence, if any, is checked by a change of the fenced step (one)."""
    if change.expected_version not in (None, known.version):
        return False
    return change.fence is None or sum(s.step_id == change.fence.step_id for s in change.steps) == 1


async def _apply(conn: AsyncConnection, change: RunCommit, *, at: datetime, carried: budget.Waiting | None,
                 known: known_plans.KnownPlan | None = None, base: known_plans.KnownPlan | None = None
                 ) -> Run | None:
    """The commit's statements. ``known``: on that plan, in one statement, None if its
    compare-and-set was refused (nothing written); else the usual way, with ``carried`` taken
    already if not None. ``base``: the plan this transaction knew of the run, if any."""
    finishing = {c.step_id: c.state for c in change.steps}
    folds = conn.dialect.name == "postgresql"
    fenced: Fenced | None = None
    if known is None:
        rest, attempt_ended, plan = await apply_fenced(conn, change, at=at)  # the fence, the fenced step's changes
        if folds and carried is None:
            carried = await budget.take_waiting(conn, change.tenant_id, change.run_id)
    else:
        rest, fenced = _split_fenced(conn, change)
        plan, attempt_ended = known.rows, fenced is not None and fenced[1] is not None
    unpromoted = len(rest.steps)
    rest = await with_promotions(conn, rest, finishing, at=at, plan=plan)
    # PostgreSQL: the events, the promotions and the outbox ride in the compare-and-set (folded_cas)
    fold_events, promoted = folds and bool(rest.events), rest.steps[unpromoted:] if folds else ()
    enqueued = _folded_outbox(conn, rest, at=at) if folds and rest.outbox else None
    claiming = claims_at_promotion(conn, change.run_id, rest.outbox, promoted, enqueued[1]) \
        if enqueued and promoted else None
    row = await _bump_version(conn, rest, at=at, with_events=fold_events, promoted=promoted,
                              rows=enqueued[0] if enqueued else (), claim=claiming[1] if claiming else None,
                              carried=carried, fenced=fenced, fence=change.fence,
                              on_version=known.version if known is not None else None)
    if row is None and known is not None:  # the run moved since that plan: the usual way
        untake_written(conn, [m.envelope.message_id for m in rest.outbox] if enqueued else ())
        return None
    row = await _refusals(conn, change, rest, row, fenced=fenced, carried=carried, promoted=promoted)
    run = run_from_row(row)
    claimed = _claimed_at_promotion(row, claiming, run) if claiming else None
    await add_steps(conn, change.tenant_id, change.run_id, change.new_steps, at=at)
    await apply_step_changes(conn, change.tenant_id, change.run_id, rest.steps[:unpromoted] if promoted else rest.steps,
                             at=at)
    if not attempt_ended:
        await end_attempt_in_commit(conn, change, at=at)
    if not fold_events:
        first_seq = run.last_seq - len(rest.events) + 1
        await _append_events(conn, change.tenant_id, change.run_id, rest.events, first_seq=first_seq, at=at)
    if enqueued is None:
        await _enqueue_as(conn, run, runtrace.stamp(rest.outbox, runtrace.parent_for(run.traceparent)), at=at)
    elif enqueued[1]:
        await _settle_as(conn, run, enqueued[1], claimed, promoted=True)
    if folds:
        known_plans.committed(conn, change.tenant_id, change.run_id, base=known or base, version=run.state_version,
                              changes=(*change.steps, *rest.steps[unpromoted:]), added=change.new_steps,
                              state=run.state)
    return run


Fenced = tuple[StepChange, RunningAttempt | None]
"""A fenced step's change written in the compare-and-set, with the attempt it ends (if folded)."""


def _split_fenced(conn: AsyncConnection, change: RunCommit) -> tuple[RunCommit, Fenced | None]:
    """``change`` without its fenced step's change (``_on_known``: one), and that change with
    the attempt it ends, both to ride in the compare-and-set."""
    if change.fence is None:
        return change, None
    mine = next(s for s in change.steps if s.step_id == change.fence.step_id)
    rest = change.model_copy(update={"steps": tuple(s for s in change.steps if s is not mine)})
    return rest, (mine, foldable_attempt(conn, change, 1))


async def _refusals(conn: AsyncConnection, change: RunCommit, rest: RunCommit, row: Row[Any] | None, *,
                    fenced: Fenced | None, carried: budget.Waiting | None, promoted: Sequence[StepChange]
                    ) -> Row[Any]:
    """The compare-and-set's row, once nothing it carried was refused; else raise why (the
    caller's transaction rolls back what it wrote)."""
    if row is None:
        await _explain_refusal(conn, rest)
    assert row is not None
    if fenced is not None and not row._mapping[FENCED_TOOK]:  # taken over as it waited: the bump must go
        try:
            await explain_step_refusal(conn, change.tenant_id, change.run_id, fenced[0], change.fence)
        except Exception as refused:
            must_not_commit(conn, refused)
            raise
    if carried is not None:
        await carried.check(conn, bool(row._mapping.get(budget.CHARGE_SHORT)))
    if promoted:
        await refuse_unapplied(conn, change.tenant_id, change.run_id, promoted, row._mapping[PROMOTED] or ())
    if fenced is not None and fenced[1] is not None:
        fenced[1].end_with(conn)
    return row


def _claimed_at_promotion(row: Row[Any], claiming: tuple[str, Claim], run: Run
                          ) -> dict[str, tuple[Claim, Step, Run]] | None:
    """The claim the compare-and-set took as it readied its step (``folded_cas``), by its
    wake-up's message id; None if it took none (the run, as it left it, hands out no work)."""
    m = row._mapping
    if m[CLAIMED_ + "step_id"] is None:
        return None
    step = step_from_mapping({name[len(CLAIMED_):]: value for name, value in m.items() if name.startswith(CLAIMED_)})
    message_id, claim = claiming
    return {message_id: (claim.model_copy(update={"owner_epoch": step.owner_epoch}), step, run)}


def _folded_outbox(conn: AsyncConnection, change: RunCommit, *, at: datetime
                   ) -> tuple[list[dict[str, object]], dict[str, str]] | None:
    """The outbox rows (and the messages listeners took) the compare-and-set can write, stamped
    with the run's trace context as ``_enqueue_as`` stamps them; None where that is not known."""
    known, traceparent = run_traces.known(change.tenant_id, change.run_id)
    if not known:
        return None
    return outbox_rows(conn, runtrace.stamp(change.outbox, runtrace.parent_for(traceparent)), at=at)


async def _settle_as(conn: AsyncConnection, run: Run, taken: dict[str, str],
                     claimed: Mapping[str, tuple[Claim, Step, Run]] | None = None, *, promoted: bool = False) -> None:
    """The listeners act on the messages they took (``_enqueue_as`` on why ``get_run`` answers
    ``run``); ``claimed``: those whose steps went in claimed (``database.settle_taken``; were
    claimed as they were readied: ``promoted``)."""
    info = conn.info
    info[_ENQUEUED_RUN] = run
    try:
        await settle_taken(conn, taken, claimed, promoted=promoted)
    finally:
        info.pop(_ENQUEUED_RUN, None)


async def _enqueue_as(conn: AsyncConnection, run: Run, messages: Sequence[OutboxMessage], *, at: datetime) -> None:
    """Write the outbox of a change whose result is ``run``; while the listeners act on it in
    this transaction (the intake claims the steps it readied, ``StepDispatcher.claim_in``),
    ``get_run`` of this run answers ``run`` instead of reading the row this change just wrote:
    nothing writes the run row while the outbox is written."""
    if not messages:
        return
    info = conn.info
    info[_ENQUEUED_RUN] = run
    try:
        await enqueue(conn, messages, at=at)
    finally:
        info.pop(_ENQUEUED_RUN, None)


@cache
def _sources_of(target: RunState) -> list[RunState]:
    """States a run may be in for ``target`` to be legal (staying put is always legal)."""
    return [s for s, nxt in RUN_TRANSITIONS.items() if target in nxt and s != target] + [target]


async def _bump_version(conn: AsyncConnection, change: RunCommit, *, at: datetime, with_events: bool = False,
                        promoted: Sequence[StepChange] = (), rows: Sequence[dict[str, object]] = (),
                        claim: Claim | None = None, carried: budget.Waiting | None = None,
                        fenced: Fenced | None = None, fence: Fence | None = None,
                        on_version: int | None = None) -> Row[Any] | None:
    """The compare-and-set: the run's new row, or None if refused. PostgreSQL (``folded_cas``):
    ``with_events``, the change's events are appended by the same statement; ``promoted``, these
    promotions are applied by it too (the row's ``PROMOTED`` lists those it took); ``rows``, these
    outbox rows (``outbox.outbox_rows``) are inserted by it; ``claim``, the promoted step it
    names is claimed by it (``claimed_inserts.claims_at_promotion``); ``carried``, this ledger
    write waiting for the commit is written by it (``budget.take_waiting``); ``fenced``, the
    fenced step's change (checked by ``fence``) and the attempt it ends are written by it;
    ``on_version``: the version expected (the known plan's, ``known_plans``)."""
    params: dict[str, object] = {"k_tenant": change.tenant_id, "k_run": change.run_id,
                                 "n_events": len(change.events), "now": at}
    expected = change.expected_version if on_version is None else on_version
    if expected is not None:
        params["k_version"] = expected
    if change.state is not None:
        params.update(new_state=change.state, new_wait_kind=change.wait_kind)
    if change.outcome is not None:
        params["new_outcome"] = change.outcome
    statement = _bump_statement(change.state, change.outcome is not None, expected is not None)
    if with_events or promoted or rows or carried is not None or fenced is not None:
        params.update(_riding_params(carried, fenced, fence))
        if with_events:
            params.update(event_params(change.events, SHAPES))
        if promoted:
            params.update(promotion_params(promoted))
        if claim is not None:
            params.update(c_step=claim.step_id, c_owner=claim.owner, c_lease_until=claim.lease_until,
                          c_attempt=claim.attempt_id)
        if rows:
            params.update(outbox_params(rows))
        folded = folded_bump(statement, with_events, bool(promoted), bool(rows), claim is not None,
                             carried.KIND if carried is not None else None,
                             fenced_shape(fenced[0], fenced[1] is not None) if fenced is not None else None)
        return (await conn.execute(folded, params)).first()
    return (await conn.execute(statement, params)).first()


def _riding_params(carried: budget.Waiting | None, fenced: Fenced | None, fence: Fence | None) -> dict[str, object]:
    """The parameters of what rides in the compare-and-set besides its own writes: a ledger
    write, the fenced step's change."""
    params = carried.params() if carried is not None else {}
    if fenced is not None:
        assert fence is not None
        params.update(fenced_params(fenced[0], fence.owner_epoch,
                                    fenced[1].claim.attempt_id if fenced[1] is not None else None))
    return params


@cache
def _bump_statement(target: RunState | None, with_outcome: bool, versioned: bool = True) -> Update:
    """The compare-and-set UPDATE, built once per shape of change and target state (its legal
    sources are the statement's own ``IN`` list: see ``step_changes._step_change_statement``).
    Not ``versioned``: a change without an expected version, which the fence's hold on the run
    orders (PostgreSQL: its row lock; SQLite: the write lock), applies on the version it finds."""
    values: dict[str, object] = {"state_version": runs.c.state_version + 1,
                                 "last_seq": runs.c.last_seq + bindparam("n_events", type_=Integer),
                                 "updated_at": bindparam("now")}
    where = [RUN_KEY, runs.c.state_version == bindparam("k_version")] if versioned else [RUN_KEY]
    if target is not None:
        values.update(state=bindparam("new_state"), wait_kind=bindparam("new_wait_kind"))
        where.append(runs.c.state.in_(_sources_of(target)))
    if with_outcome:
        values["outcome"] = bindparam("new_outcome")
    return update(runs).where(*where).values(**values).returning(*runs.c)


async def _explain_refusal(conn: AsyncConnection, change: RunCommit) -> NoReturn:
    current = await get_run(conn, change.tenant_id, change.run_id)
    if change.expected_version is not None and current.state_version != change.expected_version:
        raise ConcurrentUpdateError(f"run {change.run_id} is at version {current.state_version}, "
                                    f"writer expected {change.expected_version}")
    assert change.state is not None  # the version matched (or none was expected): the state condition refused it
    check_run_transition(current.state, change.state)
    raise ConcurrentUpdateError(f"run {change.run_id} refused the change")


async def append_events(
    conn: AsyncConnection, tenant_id: str, run_id: str, drafts: Sequence[EventDraft], *, at: datetime
) -> int:
    """Append events without a state check (observations: a claim, a denied proposal).

    The run row's ``last_seq`` is still bumped in one UPDATE, so numbering stays gapless.
    """
    result = await conn.execute(_NUMBER_EVENTS, {"k_tenant": tenant_id, "k_run": run_id, "n_events": len(drafts)})
    last_seq = result.scalar()
    if last_seq is None:
        raise NotFoundError(f"run {run_id} not found")
    await _append_events(conn, tenant_id, run_id, drafts, first_seq=int(last_seq) - len(drafts) + 1, at=at)
    return int(last_seq)


SHAPES = Redactor()
"""Run events are masked by shape on every write; configured values are masked where text enters a run."""


async def _append_events(
    conn: AsyncConnection, tenant_id: str, run_id: str, drafts: Sequence[EventDraft], *, first_seq: int, at: datetime
) -> None:
    if not drafts:
        return
    await write_later(conn, _INSERT_EVENTS, [
        {"tenant_id": tenant_id, "run_id": run_id, "run_seq": first_seq + i, "event_id": new_event_id(),
         "type": d.type, "at": at, "data": SHAPES.value(d.data)}
        for i, d in enumerate(drafts)
    ])


async def get_run(conn: AsyncConnection, tenant_id: str, run_id: str) -> Run:
    known: Run | None = conn.info.get(_ENQUEUED_RUN)
    if known is not None and (known.tenant_id, known.run_id) == (tenant_id, run_id):
        return known
    row = (await conn.execute(_SELECT_RUN, {"k_tenant": tenant_id, "k_run": run_id})).first()
    if row is None:
        raise NotFoundError(f"run {run_id} not found")
    return run_from_row(row)


async def _find_by_key(conn: AsyncConnection, tenant_id: str, key: str) -> Run | None:
    row = (await conn.execute(_BY_KEY, {"k_tenant": tenant_id, "k_key": key})).first()
    return run_from_row(row) if row else None


async def list_events(
    conn: AsyncConnection, tenant_id: str, run_id: str, *, after: int = 0, limit: int = 1000
) -> list[RunEvent]:
    """The run's log from ``after`` (exclusive), in ``run_seq`` order: what SSE resumes from."""
    result = await conn.execute(
        select(events).where(events.c.tenant_id == tenant_id, events.c.run_id == run_id, events.c.run_seq > after)
        .order_by(events.c.run_seq).limit(limit)
    )
    return [event_from_row(r) for r in result]
