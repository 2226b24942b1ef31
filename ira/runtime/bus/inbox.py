"""Applying envelopes together with their inbox rows: one transaction, one or many records.

Each inbox row is written with ``INSERT .. ON CONFLICT DO NOTHING RETURNING``: a duplicate
shows up as a row not returned instead of an IntegrityError, so no savepoint is needed
(PostgreSQL aborts a transaction on any error; a savepoint per record costs two extra round
trips) and a whole batch needs a single statement. That is what makes one transaction per
fetched batch cheap enough for ~1,000 events/s on one consumer.

On SQLite, a handler whose hooks are :class:`ReadFirst` decides before the write transaction:
SQLite has one write lock for every process on the file (``ira dev``'s triage child shares it
with the gateway's commits and the relay's claims in the main process), and a batch that read,
decided and wrote under it held it for ~100 ms, ~80 % of the time under a storm, while the
other process waited in SQLite's busy handler. The batch now reads the inbox and runs the hook's
``start`` and the handler on a snapshot (a WAL reader, no lock), then writes the inbox rows and
everything decided (``finish``) in one short write transaction. The inbox insert is still what
decides: a record applied by someone else between the two (its row not returned) makes the
batch read and decide again, and every other write of the handler is a compare-and-set or an
insert against a unique key, so a decision on a snapshot that moved fails instead of landing.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from datetime import datetime
from typing import Any, Protocol, runtime_checkable

from sqlalchemy import bindparam, select
from sqlalchemy.ext.asyncio import AsyncConnection

from ira.core.clock import Clock
from ira.core.envelope import Envelope
from ira.core.errors import ConcurrentUpdateError
from ira.runtime.bus.record import InboxHandler, Outcome, RecordMeta
from ira.runtime.store.database import Database
from ira.runtime.store.new_rows import InsertNew
from ira.runtime.store.schema import inbox

InboxKey = tuple[str, str]
"""(tenant_id, message_id)"""

class BatchHooks(Protocol):
    """What a handler that works per batch, not per record, does around the records of one
    transaction: read for all of them at once (:meth:`start`), write for all of them at once
    (:meth:`finish`). Either may raise to roll the batch back."""

    async def start(self, conn: AsyncConnection, envelopes: Sequence[Envelope]) -> None:
        """Before the handler sees any of ``envelopes`` (the batch's new ones, in order)."""
        ...

    async def finish(self, conn: AsyncConnection) -> None:
        """After the handler saw every record of the transaction, before it commits."""
        ...


@runtime_checkable
class ReadFirst(BatchHooks, Protocol):
    """Batch hooks whose ``start`` and handler only read and decide, and whose ``finish`` writes
    everything decided: the applier may run the first two on a reader, before the write
    transaction (on SQLite, see the module doc), and then hands their work over with :meth:`carry`."""

    def carry(self, read: AsyncConnection, write: AsyncConnection) -> None:
        """What ``start`` and the handler decided on ``read`` is ``write``'s now (``finish`` is next)."""
        ...


async def record_inbox_many(
    conn: AsyncConnection, *, consumer: str, keys: Sequence[InboxKey], at: datetime
) -> set[InboxKey]:
    """Remember ``keys`` for ``consumer`` in the caller's transaction; return the new ones.

    Keys already known (or repeated within ``keys``) are not returned: those are duplicates.
    """
    if not keys:
        return set()
    rows = [{"tenant_id": t, "consumer": consumer, "message_id": m, "received_at": at} for t, m in dict.fromkeys(keys)]
    # Parameters as a list (SQLAlchemy's "insertmanyvalues"), not .values(rows): one compiled
    # statement for every batch size instead of one compile per distinct row count.
    result = await conn.execute(_INSERT_NEW.on(conn), rows)
    return {(row.tenant_id, row.message_id) for row in result}


_INSERT_NEW = InsertNew(inbox, inbox.c.tenant_id, inbox.c.message_id)
_KNOWN = select(inbox.c.tenant_id, inbox.c.message_id).where(
    inbox.c.tenant_id.in_(bindparam("tenants", expanding=True)), inbox.c.consumer == bindparam("consumer"),
    inbox.c.message_id.in_(bindparam("ids", expanding=True)))


async def known_inbox(conn: AsyncConnection, *, consumer: str, keys: Sequence[InboxKey]) -> set[InboxKey]:
    """Which of ``keys`` ``consumer`` already remembers (a read: nothing is written)."""
    if not keys:
        return set()
    wanted = set(keys)
    rows = await conn.execute(_KNOWN, {"tenants": sorted({t for t, _ in wanted}), "consumer": consumer,
                                       "ids": sorted({m for _, m in wanted})})
    return {(row.tenant_id, row.message_id) for row in rows} & wanted


class BatchItemError(Exception):
    """The handler failed on item ``index`` of a batch (the whole transaction rolled back): the
    items before it can go again as a batch, only that one needs to go alone."""

    def __init__(self, index: int) -> None:
        super().__init__(f"item {index} of the batch failed")
        self.index = index


class InboxApplier:
    """Runs an :class:`InboxHandler` for records whose inbox row is new, in one transaction."""

    def __init__(
        self,
        db: Database,
        *,
        consumer: str,
        handler: InboxHandler,
        clock: Clock,
        span: Callable[[Envelope, RecordMeta], AbstractContextManager[Any]],
        hooks: BatchHooks | None = None,
    ) -> None:
        self._db, self._consumer, self._handler = db, consumer, handler
        self._clock, self._span, self._hooks = clock, span, hooks
        self._read_first = hooks if isinstance(hooks, ReadFirst) and db.dialect == "sqlite" else None

    async def apply(self, items: Sequence[tuple[Envelope, RecordMeta]], *, locate: bool = False) -> list[Outcome]:
        """All of ``items`` or nothing: any exception rolls the whole transaction back. With
        ``locate`` a handler's failure is raised as :class:`BatchItemError` naming its item."""
        if self._read_first is not None:
            return await self._apply_read_first(self._read_first, items, locate=locate)
        async with self._db.transaction() as conn:
            keys = [(envelope.tenant_id, envelope.message_id) for envelope, _ in items]
            fresh = await record_inbox_many(conn, consumer=self._consumer, keys=keys, at=self._clock.now())
            new: list[tuple[Envelope, RecordMeta] | None] = []  # None: a duplicate
            for key, record in zip(keys, items, strict=True):
                new.append(record if key in fresh else None)
                fresh.discard(key)  # a second copy inside the same batch is a duplicate too
            outcomes = await self._decide(conn, new, locate=locate)
            if self._hooks is not None:
                await self._hooks.finish(conn)
            return outcomes

    async def _apply_read_first(self, hooks: ReadFirst, items: Sequence[tuple[Envelope, RecordMeta]], *,
                                locate: bool) -> list[Outcome]:
        """Decide on a reader, then write the inbox rows and the decisions in one short write
        transaction (module doc). A record another applier remembered in between makes the
        batch go again from its read (bounded; then a retryable ConcurrentUpdateError)."""
        keys = [(envelope.tenant_id, envelope.message_id) for envelope, _ in items]
        for _ in range(_READ_FIRST_TRIES):
            async with self._db.snapshot() as read:
                known = await known_inbox(read, consumer=self._consumer, keys=keys)
                fresh: list[InboxKey] = []
                new: list[tuple[Envelope, RecordMeta] | None] = []  # None: a duplicate
                for key, record in zip(keys, items, strict=True):
                    is_new = key not in known
                    new.append(record if is_new else None)
                    if is_new:
                        fresh.append(key)
                        known.add(key)  # a second copy inside the same batch is a duplicate too
                outcomes = await self._decide(read, new, locate=locate)
            if not fresh:
                return outcomes
            try:
                async with self._db.transaction() as conn:
                    written = await record_inbox_many(conn, consumer=self._consumer, keys=fresh, at=self._clock.now())
                    if len(written) != len(fresh):
                        raise _Moved  # rolls the inbox rows back
                    hooks.carry(read, conn)
                    await hooks.finish(conn)
                    return outcomes
            except _Moved:
                continue  # remembered by another applier since the read: read and decide again
        raise ConcurrentUpdateError(f"{self._consumer}: the batch's records kept being applied elsewhere")

    async def _decide(self, conn: AsyncConnection, new: Sequence[tuple[Envelope, RecordMeta] | None], *,
                      locate: bool) -> list[Outcome]:
        """The hooks' ``start`` and the handler for the new records (None: a duplicate) on ``conn``."""
        if self._hooks is not None:
            await self._hooks.start(conn, [item[0] for item in new if item is not None])
        outcomes = []
        for index, item in enumerate(new):
            if item is None:
                outcomes.append(Outcome.DUPLICATE)
                continue
            envelope, meta = item
            try:
                with self._span(envelope, meta):
                    await self._handler(conn, envelope, meta)
            except Exception as exc:
                if locate:
                    raise BatchItemError(index) from exc
                raise
            outcomes.append(Outcome.PROCESSED)
        return outcomes


class _Moved(Exception):
    """The inbox moved between a read-first batch's read and its write."""


_READ_FIRST_TRIES = 3
