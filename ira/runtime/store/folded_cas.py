"""PostgreSQL: a run commit's compare-and-set, the events it appends, the steps it makes
ready and its outbox rows, in one statement.

On PostgreSQL a statement's cost in a durable step is mostly its round trip and SQLAlchemy's
execution around it (~130 µs of CPU each here, the database's share a fraction of that), not
the SQL. What a commit writes once its compare-and-set took the run row rides in that UPDATE
as data-modifying CTEs:

* its events, numbered from the ``last_seq`` the UPDATE returns: ``INSERT INTO events ..
  SELECT`` from the returned row joined with the drafts (``unnest .. WITH ORDINALITY``, one
  array per column), so numbering stays gapless (the very row the UPDATE locked and wrote);
* the BLOCKED steps its finished steps make ready (``step_changes.with_promotions``): one
  conditional UPDATE of them all, ``RETURNING`` the ids it took, which come back with the run;
* the claim of the one step it readies whose wake-up a listener of this process took and
  lets the store claim (``claimed_inserts.claims_at_promotion``; the step's eager claim, which
  was a statement of its own after this one): the promotion leaves it RUNNING under that
  listener's lease, epoch + 1, and its attempt is inserted, if the run as this statement leaves
  it hands out work (else it is READY, as the claim would have been refused);
* its outbox rows, when the run's trace context, which the messages carry, is known before the
  row comes back (``run_traces``): ``INSERT INTO outbox .. SELECT`` as the events, in order. The
  listeners take their messages before the statement and act on them after the commit's other
  writes (``settle_taken``), as ``outbox.enqueue`` does;
* a ledger write that waited in the transaction for this commit (``budget.take_waiting``: a
  step's one-unit charge, a branch's slice close), which took a round trip of its own while the
  transaction held the run's row; read after the UPDATE took that row, so the budget's rows are
  locked after the run's, and a charge that did not fit comes back as ``budget.CHARGE_SHORT``.

A refused compare-and-set returns no row, and no CTE writes (each reads the UPDATE's row);
the caller raises as before (``runs._explain_refusal``). A promotion the step's state refused
is missing from the returned ids, and the caller explains it as the separate UPDATE did
(``step_changes.refuse_unapplied``); the whole transaction then rolls back. SQLite keeps
separate statements (its CTEs cannot modify data).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from functools import cache
from typing import Any, NamedTuple

from sqlalchemy import (
    JSON,
    Integer,
    LargeBinary,
    String,
    Text,
    and_,
    bindparam,
    case,
    cast,
    column,
    exists,
    func,
    insert,
    literal,
    select,
    true,
    update,
)
from sqlalchemy.dialects.postgresql import ARRAY
from sqlalchemy.sql import Select, Update

from ira.core.commit import EventDraft, StepChange
from ira.core.ids import new_event_id
from ira.core.redact import Redactor
from ira.core.states import StepState
from ira.runtime.store import budget
from ira.runtime.store.schema import attempts, events, outbox, steps
from ira.runtime.store.step_changes import sources_of
from ira.runtime.store.steps import CLAIMABLE_RUN_STATES

PROMOTED = "promoted"
"""The column of the folded statement's row that lists the steps it made ready."""


@cache
def folded_bump(bump: Update, with_events: bool, with_promotions: bool, with_outbox: bool = False,
                with_claim: bool = False, carrying: str | None = None, fenced: FencedShape | None = None
                ) -> Select[Any]:
    """``bump`` (the compare-and-set, ``RETURNING`` the run's columns) with the INSERT of its
    events, the UPDATE of its promotions, the INSERT of its outbox rows: the run's row back
    (with ``PROMOTED``), or none if refused. ``with_claim``: one of the promotions is claimed
    by it too (``claims_at_promotion``), its row back in the ``CLAIMED_`` columns.
    ``carrying``: a ledger write of that ``KIND`` waiting for this commit (``budget.take_waiting``),
    written by it (with ``budget.CHARGE_SHORT`` for a charge). ``fenced``: the fenced step's own
    change (``known_plans``: a commit on a plan this process knows), written by it after the run's
    row as ``step_changes.apply_fenced`` writes it (with the attempt's end), ``FENCED_TOOK``
    saying whether the fence let it. Built once per shape."""
    if fenced is not None:  # a stale fence seen before the statement: refused, nothing written
        bump = bump.where(_fence_holds(fenced.target))
    bumped = bump.cte("bumped")
    writes: list[Any] = []
    columns: list[Any] = [bumped]
    if fenced is not None:
        fenced_writes, took = _fenced_change(bumped, fenced)
        writes += fenced_writes
        columns.append(took)
    if carrying is not None:
        carried, short = budget.carried_writes(carrying, bumped)
        writes += carried
        columns += [short] if short is not None else []
    if with_events:
        drafts = func.unnest(
            bindparam("e_ids", type_=ARRAY(String)), bindparam("e_types", type_=ARRAY(String)),
            bindparam("e_data", type_=ARRAY(Text)),
        ).table_valued(column("event_id", String), column("type", String), column("data", Text),
                       with_ordinality="ord").render_derived(name="drafts")
        first = bumped.c.last_seq - bindparam("n_events", type_=Integer)
        writes.append(insert(events).from_select(
            ["tenant_id", "run_id", "run_seq", "event_id", "type", "at", "data"],
            select(bumped.c.tenant_id, bumped.c.run_id, first + drafts.c.ord, drafts.c.event_id, drafts.c.type,
                   bindparam("now", type_=events.c.at.type), cast(drafts.c.data, JSON))
            .select_from(bumped.join(drafts, true())),
        ).cte("appended"))
    if with_outbox:
        writes.append(_enqueued(bumped))
    claimed = None
    if with_promotions:
        promoted = update(steps).where(
            steps.c.tenant_id == bindparam("k_tenant"), steps.c.run_id == bindparam("k_run"),
            steps.c.step_id.in_(bindparam("p_ids", expanding=True)),
            steps.c.state.in_(bindparam("p_sources", expanding=True)),
            exists(select(bumped.c.run_id)),
        ).values(**(_claiming(bumped) if with_claim else _readying())) \
            .returning(*(steps.c if with_claim else (steps.c.step_id,))).cte(PROMOTED)
        writes.append(promoted)
        columns.append(select(func.array_agg(promoted.c.step_id)).scalar_subquery().label(PROMOTED))
        if with_claim:
            claimed = select(promoted).where(promoted.c.state == StepState.RUNNING).subquery("claimed")
            writes.append(_started(claimed))
            columns += [c.label(CLAIMED_ + c.name) for c in claimed.c]
    folded = select(*columns).add_cte(*writes)
    return folded if claimed is None else folded.select_from(bumped.outerjoin(claimed, true()))


class FencedShape(NamedTuple):
    """The shape of a fenced step's change riding in the compare-and-set (``folded_bump``)."""

    with_result_ref: bool
    release_claim: bool
    with_depends_on: bool
    target: StepState
    ending: bool
    """The running attempt ends with it (``steps.attempt_ended_by``)."""


FENCED_TOOK = "fenced_took"
"""The column of a statement with a fenced change: whether the fence let the step's UPDATE write."""


def _fence_holds(target: StepState) -> Any:
    """The fenced step, as the statement's snapshot holds it, has the writer's epoch and may move
    to ``target``: the compare-and-set's own condition, so that a fence found stale before the
    statement refuses the whole of it. It does not lock the step's row (the run's comes first):
    a claim that took the step between the snapshot and the run's lock is found by the step's
    UPDATE (``FENCED_TOOK`` false) after the compare-and-set wrote."""
    return exists(select(steps.c.step_id).where(
        steps.c.tenant_id == bindparam("k_tenant"), steps.c.run_id == bindparam("k_run"),
        steps.c.step_id == bindparam("f_step"), steps.c.owner_epoch == bindparam("f_epoch"),
        steps.c.state.in_(sources_of(target))))


def _fenced_change(bumped: Any, shape: FencedShape) -> tuple[list[Any], Any]:
    """The fenced step's conditional UPDATE (its legal source states, its owner's epoch) once the
    compare-and-set took the run's row, and its attempt's end once it wrote (``f_`` parameters)."""
    values: dict[str, Any] = {"state": bindparam("f_state"), "updated_at": bindparam("now")}
    if shape.with_result_ref:
        values["result_ref"] = bindparam("f_result_ref")
    if shape.release_claim:
        values.update(owner=None, lease_until=None)
    if shape.with_depends_on:
        values["depends_on"] = bindparam("f_depends_on", type_=steps.c.depends_on.type)
    changed = update(steps).where(
        steps.c.tenant_id == bindparam("k_tenant"), steps.c.run_id == bindparam("k_run"),
        steps.c.step_id == bindparam("f_step"), steps.c.state.in_(sources_of(shape.target)),
        steps.c.owner_epoch == bindparam("f_epoch"), exists(select(bumped.c.run_id)),
    ).values(**values).returning(steps.c.step_id).cte("changed")
    writes = [changed]
    if shape.ending:
        writes.append(update(attempts).where(
            attempts.c.tenant_id == bindparam("k_tenant"), attempts.c.attempt_id == bindparam("f_attempt"),
            exists(select(changed.c.step_id)),
        ).values(ended_at=bindparam("now"), outcome="finished", error=None).cte("ended"))
    return writes, exists(select(changed.c.step_id)).label(FENCED_TOOK)


def fenced_params(change: StepChange, epoch: int, attempt_id: str | None) -> dict[str, object]:
    """``change`` of the fenced step as ``_fenced_change``'s parameters."""
    params: dict[str, object] = {"f_step": change.step_id, "f_state": change.state, "f_epoch": epoch}
    if change.result_ref is not None:
        params["f_result_ref"] = change.result_ref
    if change.depends_on is not None:
        params["f_depends_on"] = list(change.depends_on)
    if attempt_id is not None:
        params["f_attempt"] = attempt_id
    return params


def fenced_shape(change: StepChange, ending: bool) -> FencedShape:
    return FencedShape(change.result_ref is not None, change.release_claim, change.depends_on is not None,
                       change.state, ending)


CLAIMED_ = "claimed_"
"""The prefix of the folded statement's columns that hold the step it claimed (``with_claim``)."""


def _readying() -> dict[str, Any]:
    return {"state": bindparam("p_state"), "owner": None, "lease_until": None, "updated_at": bindparam("now")}


def _claiming(bumped: Any) -> dict[str, Any]:
    """The promotions' values when step ``c_step`` is claimed as it is readied: RUNNING, owned,
    leased, epoch + 1, as the claim's UPDATE right after would leave it (``steps._CLAIM``), if the
    run as the compare-and-set leaves it hands out work; the others (and it, otherwise) READY."""
    mine = and_(steps.c.step_id == bindparam("c_step"),
                select(bumped.c.state).scalar_subquery().in_(CLAIMABLE_RUN_STATES))
    return {"state": case((mine, StepState.RUNNING), else_=bindparam("p_state")),
            "owner": case((mine, bindparam("c_owner", type_=steps.c.owner.type)), else_=None),
            "lease_until": case((mine, bindparam("c_lease_until", type_=steps.c.lease_until.type)), else_=None),
            "owner_epoch": case((mine, steps.c.owner_epoch + 1), else_=steps.c.owner_epoch),
            "updated_at": bindparam("now")}


def _started(claimed: Any) -> Any:
    """The claimed step's attempt, started (as ``steps._CLAIM_AND_START`` starts one)."""
    return insert(attempts).from_select(
        ["tenant_id", "attempt_id", "run_id", "step_id", "owner", "owner_epoch", "started_at", "usage"],
        select(claimed.c.tenant_id, bindparam("c_attempt", type_=attempts.c.attempt_id.type), claimed.c.run_id,
               claimed.c.step_id, claimed.c.owner, claimed.c.owner_epoch,
               bindparam("now", type_=attempts.c.started_at.type), literal({}, type_=attempts.c.usage.type)),
    ).cte("started")


def _enqueued(bumped: Any) -> Any:
    """The outbox rows (``outbox.outbox_rows``) as arrays, inserted in their order (the relay
    publishes by id: per-key order) once the compare-and-set took the run row."""
    m = func.unnest(*(bindparam(f"o_{name}", type_=ARRAY(kind)) for name, kind in _OUTBOX_ARRAYS)).table_valued(
        *(column(name, kind) for name, kind in _OUTBOX_ARRAYS), with_ordinality="ord").render_derived(name="messages")
    now = bindparam("now", type_=outbox.c.created_at.type)
    return insert(outbox).from_select(
        ["tenant_id", "message_id", "topic", "key", "value", "headers", "created_at", "awaits"],
        select(m.c.tenant_id, m.c.message_id, m.c.topic, m.c.key, m.c.value, cast(m.c.headers, JSON), now,
               m.c.awaits)
        .select_from(bumped.join(m, true())).order_by(m.c.ord),
    ).cte("enqueued")


_OUTBOX_ARRAYS: tuple[tuple[str, Any], ...] = (
    ("tenant_id", String), ("message_id", String), ("topic", String), ("key", String), ("value", LargeBinary),
    ("headers", Text), ("awaits", String))


def outbox_params(rows: Sequence[dict[str, Any]]) -> dict[str, object]:
    """``outbox.outbox_rows``' rows as ``folded_bump``'s arrays (headers as JSON text)."""
    return {"o_tenant_id": [r["tenant_id"] for r in rows], "o_message_id": [r["message_id"] for r in rows],
            "o_topic": [r["topic"] for r in rows], "o_key": [r["key"] for r in rows],
            "o_value": [r["value"] for r in rows], "o_headers": [json.dumps(r["headers"]) for r in rows],
            "o_awaits": [r["awaits"] for r in rows]}


def event_params(drafts: Sequence[EventDraft], shapes: Redactor) -> dict[str, object]:
    """The drafts as ``folded_bump``'s arrays; data masked by shape, as every event write is."""
    return {"e_ids": [new_event_id() for _ in drafts], "e_types": [d.type.value for d in drafts],
            "e_data": [json.dumps(shapes.value(d.data)) for d in drafts]}


def promotion_params(promotions: Sequence[StepChange]) -> dict[str, object]:
    """The promotions (``StepChange``\\ s to READY that release the claim, as ``with_promotions``
    makes them) as ``folded_bump``'s parameters."""
    assert all(c.state == StepState.READY and c.release_claim and c.result_ref is None and c.depends_on is None
               for c in promotions)
    return {"p_ids": [c.step_id for c in promotions], "p_state": StepState.READY,
            "p_sources": sources_of(StepState.READY)}
