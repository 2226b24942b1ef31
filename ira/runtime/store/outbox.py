"""The outbox: messages written with the state they announce, published after commit.

The relay claims unsent rows in short transactions (a lease per row, so N relays never
publish the same row at once and a dead relay's rows come back), publishes them, then marks
them sent. A crash between publish and mark publishes again; receivers dedupe by
``message_id`` in their inbox.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import and_, bindparam, exists, func, insert, or_, select, union_all, update
from sqlalchemy.ext.asyncio import AsyncConnection

from ira.core.commit import OutboxMessage
from ira.core.envelope import Envelope
from ira.runtime.store.database import settle_taken, take_written
from ira.runtime.store.new_rows import InsertNew
from ira.runtime.store.schema import inbox, outbox

MessageKey = tuple[str, str]
"""(tenant_id, message_id): a message's identity in the outbox."""


@dataclass(frozen=True, slots=True)
class OutboxRow:
    """A claimed outbox row, ready to publish (the database's own values: nothing to validate)."""

    id: int
    tenant_id: str
    message_id: str
    topic: str
    key: str
    value: bytes
    headers: dict[str, str]
    created_at: datetime

def message_headers(message: OutboxMessage) -> dict[str, str]:
    """The Kafka headers of DESIGN.md §5, taken from the envelope."""
    headers = envelope_headers(message.envelope)
    if message.urgent:
        headers[URGENT_HEADER] = "true"
    return headers


URGENT_HEADER = "urgent"
"""On a record its writer marked urgent (``OutboxMessage.urgent``): consumers take it first."""


def envelope_headers(env: Envelope) -> dict[str, str]:
    """The Kafka headers of DESIGN.md §5 for ``env``."""
    headers = {"event_id": env.message_id, "schema": f"{env.type}/v{env.schema_version}", "tenant_id": env.tenant_id}
    if env.traceparent:
        headers["traceparent"] = env.traceparent
    return headers

def _row(m: OutboxMessage, at: datetime) -> dict[str, object]:
    return {"tenant_id": m.envelope.tenant_id, "message_id": m.envelope.message_id, "topic": m.topic, "key": m.key,
            "value": m.envelope.to_bytes(), "headers": message_headers(m), "created_at": at, "awaits": m.awaits}


INSERT_OUTBOX = insert(outbox)
"""Built once: ``enqueue``'s, and ``runs.create_run``'s, which writes the rows ``outbox_rows`` made."""


async def enqueue(conn: AsyncConnection, messages: Sequence[OutboxMessage], *, at: datetime) -> None:
    """Write messages in the caller's transaction; they are published only if it commits.

    A message a listener of this process takes (a step wake-up for a role here with a free
    slot: ``StepIntake.take``) gets no row: nothing would ever read it. The taker acts on it in
    this same transaction (the intake claims the step: ``StepIntake.taken``) and hears of it
    once it commits; the claim is the step's durable record, and a step whose taker dies is
    found in the steps table by the scanner (``ira.runtime.intake`` says why no copy is needed).
    """
    if not messages:
        return
    rows, taken = outbox_rows(conn, messages, at=at)
    if rows:
        await conn.execute(INSERT_OUTBOX, rows)
    if taken:
        await settle_taken(conn, taken)


def outbox_rows(conn: AsyncConnection, messages: Sequence[OutboxMessage], *, at: datetime
                ) -> tuple[list[dict[str, object]], dict[str, str]]:
    """The rows ``enqueue`` writes for ``messages`` (none for a taken one), and ``{message_id:
    taker}`` of those a listener takes (``take_written``: call once per write, then
    ``settle_taken`` once written)."""
    taken = take_written(conn, messages)
    return [_row(m, at) for m in messages if m.envelope.message_id not in taken], taken


async def enqueue_new(conn: AsyncConnection, messages: Sequence[OutboxMessage], *, at: datetime) -> set[MessageKey]:
    """Write the messages the outbox does not hold yet; return the keys of those written.

    A message whose ``(tenant_id, message_id)`` is already there (sent or not) is left alone:
    deterministic ids make the outbox the durable dedupe of whoever enqueues with them (the
    webhook's alert states). ``INSERT .. ON CONFLICT DO NOTHING RETURNING``, one statement.
    """
    if not messages:
        return set()
    rows = {(m.envelope.tenant_id, m.envelope.message_id): _row(m, at) for m in messages}  # one per id
    result = await conn.execute(_INSERT_NEW.on(conn), list(rows.values()))
    written = {(row.tenant_id, row.message_id) for row in result}
    if any(m.urgent for m in messages):  # announced once committed (eager triage); no listener takes an alert
        take_written(conn, [m for m in messages if m.urgent and (m.envelope.tenant_id, m.envelope.message_id)
                            in written])
    return written


async def has_older_pending(conn: AsyncConnection, message: OutboxMessage, *, consumer: str) -> bool:
    """Whether an older row of ``message``'s topic and key may still be on its way to ``consumer``:
    unsent, or sent and not yet seen in ``consumer``'s inbox by the scanner (``awaits``). A
    message handed to its consumer in-process (eager) must not overtake it: per-key order."""
    older = outbox.alias("older")
    mine = select(outbox.c.id).where(outbox.c.tenant_id == message.envelope.tenant_id,
                                     outbox.c.message_id == message.envelope.message_id).scalar_subquery()
    applied = exists().where(inbox.c.tenant_id == older.c.tenant_id, inbox.c.consumer == consumer,
                             inbox.c.message_id == older.c.message_id)
    found = await conn.execute(select(older.c.id).where(
        older.c.topic == message.topic, older.c.key == message.key, older.c.id < mine,
        or_(older.c.sent_at.is_(None), older.c.awaits == consumer), ~applied).limit(1))
    return found.first() is not None


_INSERT_NEW = InsertNew(outbox, outbox.c.tenant_id, outbox.c.message_id)
"""``enqueue_new``'s statement, built once (``InsertNew``)."""


def _claimable(now: Any) -> Any:
    return and_(outbox.c.sent_at.is_(None), or_(outbox.c.claimed_until.is_(None), outbox.c.claimed_until < now))

async def claim_batch(
    conn: AsyncConnection, *, relay_id: str, now: datetime, lease: timedelta, limit: int,
    lanes: Sequence[Sequence[str]] = (),
) -> list[OutboxRow]:
    """Lease up to ``limit`` unsent rows, oldest first within each lane.

    ``lanes``: topics in priority order; a lane's rows are claimed before the next lane's, and
    topics in no lane come last. A topic is in one lane only, so each topic (and each key) is
    still relayed oldest first; a backlog of bulk messages (a storm's follow-ups) no longer
    stands before a new incident's run request.

    The claimable condition is repeated on the outer UPDATE: under PostgreSQL's READ
    COMMITTED a concurrent relay that claimed the same row first makes the re-check fail,
    so a row is never leased twice.
    """
    listed = [topic for lane in lanes for topic in lane]
    steps: list[tuple[Any, dict[str, object]]] = [
        (_lane_statement(len(lane)), {f"topic_{i}": topic for i, topic in enumerate(lane)}) for lane in lanes if lane]
    steps.append((_CLAIM["not_in"], {"topics": listed}) if listed else (_CLAIM["all"], {}))
    rows: list[OutboxRow] = []
    for statement, topics in steps:
        if len(rows) >= limit:
            break
        params = {"relay_id": relay_id, "now": now, "until": now + lease, "limit": limit - len(rows), **topics}
        result = await conn.execute(statement, params)
        rows += [OutboxRow(*r) for r in result]
    return sorted(rows, key=lambda r: r.id)


def _claim_statement(topics: Any) -> Any:
    """Lease the oldest claimable rows (of ``topics``); parameters ``relay_id``, ``now``,
    ``until``, ``limit`` (and ``topics``, a list)."""
    now = bindparam("now", type_=outbox.c.claimed_until.type)
    claimable = _claimable(now) if topics is None else and_(_claimable(now), topics)
    candidates = (
        select(outbox.c.id).where(claimable).order_by(outbox.c.id).limit(bindparam("limit"))
        .with_for_update(skip_locked=True)
    )
    return _lease(candidates, now)


def _lane_statement(topics: int) -> Any:
    """Lease a lane's oldest claimable rows, its ``topics`` topics (``topic_0`` ...) each read
    oldest first on ``ix_outbox_unsent_topic`` up to ``limit``, the lane's oldest ``limit`` of
    those. One topic at a time: a lane whose topics have few unsent rows reads those few, where
    ``topic IN (..)`` walked every unsent row of every other topic, once per relay pass."""
    if topics not in _LANES:
        now = bindparam("now", type_=outbox.c.claimed_until.type)
        parts = [select(outbox.c.id).where(outbox.c.topic == bindparam(f"topic_{i}"), _claimable(now))
                 .order_by(outbox.c.id).limit(bindparam("limit")).with_for_update(skip_locked=True)
                 .subquery(f"topic_{i}") for i in range(topics)]
        lane = union_all(*(select(part.c.id) for part in parts)).subquery("lane")
        _LANES[topics] = _lease(select(lane.c.id).order_by(lane.c.id).limit(bindparam("limit")), now)
    return _LANES[topics]


def _lease(candidates: Any, now: Any) -> Any:
    """Lease ``candidates`` (ids), selected once: a materialized CTE on PostgreSQL, where
    ``id IN (SELECT .. LIMIT n FOR UPDATE SKIP LOCKED)`` could run the subquery again per
    updated row, skip the rows the update had just locked, and lease more than ``n``."""
    chosen = candidates.cte("chosen").prefix_with("MATERIALIZED", dialect="postgresql")
    return (
        update(outbox)
        .where(outbox.c.id.in_(select(chosen.c.id)), _claimable(now))
        .values(claimed_by=bindparam("relay_id"), claimed_until=bindparam("until", type_=outbox.c.claimed_until.type))
        .returning(outbox.c.id, outbox.c.tenant_id, outbox.c.message_id, outbox.c.topic, outbox.c.key,
                   outbox.c.value, outbox.c.headers, outbox.c.created_at)
    )


_CLAIM = {"all": _claim_statement(None),
          "not_in": _claim_statement(outbox.c.topic.not_in(bindparam("topics", expanding=True)))}
_LANES: dict[int, Any] = {}
"""The relay's claims, built once per shape (parameters, not literals: the compiled form is
SQLAlchemy's cached one, with no statement built or keyed per pass); lanes by topic count."""


async def mark_sent(conn: AsyncConnection, *, relay_id: str, ids: Sequence[int], at: datetime) -> int:
    """Mark rows this relay still holds as sent; returns how many."""
    if not ids:
        return 0
    result = await conn.execute(_MARK_SENT, {"ids": list(ids), "relay_id": relay_id, "at": at})
    return result.rowcount


_MARK_SENT = (
    update(outbox)
    .where(outbox.c.id.in_(bindparam("ids", expanding=True)), outbox.c.claimed_by == bindparam("relay_id"),
           outbox.c.sent_at.is_(None))
    .values(sent_at=bindparam("at", type_=outbox.c.sent_at.type), claimed_until=None)
)

_OLDEST_UNSENT = select(func.min(outbox.c.created_at)).where(outbox.c.sent_at.is_(None))
"""Built once: read every scanner pass (see ``timers._DUE``)."""


_ANY_CLAIMABLE = select(outbox.c.id).where(_claimable(bindparam("now", type_=outbox.c.claimed_until.type))).limit(1)
"""Built once: the idle relay's question before each pass (``any_claimable``)."""


async def any_claimable(conn: AsyncConnection, *, now: datetime) -> bool:
    """Whether ``claim_batch`` would find a row: one read, answered from a reader connection.

    An idle relay asks this instead of claiming: a claim is a write transaction (on SQLite the
    one write lock, which every step's commit waits for; on PostgreSQL BEGIN, a claim per lane,
    COMMIT), taken every poll interval even when there is nothing to send.
    """
    return (await conn.execute(_ANY_CLAIMABLE, {"now": now})).first() is not None


async def oldest_unsent_age(conn: AsyncConnection, *, now: datetime) -> timedelta | None:
    """How long the oldest unsent row has waited (the relay's health, exported as a metric)."""
    oldest = (await conn.execute(_OLDEST_UNSENT)).scalar()
    if oldest is None:
        return None
    if oldest.tzinfo is None:  # aggregate results bypass the column type on SQLite
        oldest = oldest.replace(tzinfo=UTC)
    return now - oldest
