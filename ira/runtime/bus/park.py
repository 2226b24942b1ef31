"""Keeping a failing record from holding its partition: the hold budget, the park, the re-drive.

A transient failure is tried again in place, with backoff, only while the partition has been
held for less than ``consumer.max_hold`` since its last success (:class:`Hold`). Past that the
record is *parked*: written to the store (:mod:`ira.runtime.store.parked`) with its raw bytes,
then its offset is committed like any other outcome, so the records behind it go on. The
consumer's re-drive loop (:meth:`ParkingLot.run`) tries parked records again with capped
exponential backoff until they have an outcome: applied (exactly once: the inbox still holds
the effect and the message id together), a duplicate, or dead-lettered.

If the store itself is what fails, parking fails too: the record stays in place and is tried
again (nothing is committed past it). Every record of that consumer needs the store, so there
is nothing to let through meanwhile, and nothing is lost.

Parking gives up the record's order relative to later records of its key; every handler
already copes with redelivery and reordering (the inbox, stale-event checks, step claims).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from contextlib import suppress
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from ira.core.clock import Clock
from ira.core.envelope import DeadLetter, Envelope
from ira.core.errors import InvalidMessageError, PlatformError
from ira.runtime.bus.record import RecordMeta, RecordOutcome, RecordShape, error_code, record_meta
from ira.runtime.store import parked as store
from ira.runtime.store.database import Database
from ira.runtime.store.parked import ParkedRecord, ParkSummary

log = logging.getLogger(__name__)

Attempt = Callable[[Any, RecordMeta, int], Awaitable[RecordOutcome]]
"""The runner's one try of a record: returns its outcome or raises a retryable failure."""


class Hold:
    """The time one fetched batch of a partition may spend waiting on failing records.

    Shared by the batch's records, so sixty bad records in a row (or spread between good
    ones) hold their partition ``limit`` in all, not sixty times over: once it is spent, a
    record that fails is parked at its first failure.
    """

    def __init__(self, limit: timedelta) -> None:
        self._left = limit

    def exceeded_by(self, delay: timedelta) -> bool:
        """Whether waiting ``delay`` before the next try would overdraw the hold."""
        return delay > self._left

    def spend(self, delay: timedelta) -> None:
        """``delay`` was waited in place."""
        self._left -= delay


@dataclass(frozen=True)
class StoredRecord(RecordShape):
    """A parked record in the shape of the consumer record it was (what the runner reads)."""

    @classmethod
    def of(cls, parked: ParkedRecord) -> StoredRecord:
        return cls(topic=parked.topic, partition=parked.partition, offset=parked.offset,
                   timestamp=parked.timestamp_ms, key=parked.key, value=parked.value,
                   headers=tuple((k, v.encode()) for k, v in parked.headers.items()))


def _identity(value: bytes | None, meta: RecordMeta, message_id: str | None) -> tuple[str, str]:
    """(tenant_id, message_id) of a record, also of one whose envelope does not parse."""
    tenant = meta.headers.get("tenant_id") or "unknown"
    try:
        envelope = Envelope.from_bytes(value or b"")
        tenant, message_id = envelope.tenant_id, envelope.message_id
    except InvalidMessageError:
        pass
    return tenant[:64], (message_id or f"{meta.topic}:{meta.partition}:{meta.offset}")[:200]


def _reason(exc: BaseException) -> str:
    return exc.message if isinstance(exc, PlatformError) else f"{type(exc).__name__}: {exc}"


class ParkingLot:
    """One consumer's parked and dead-lettered records in the store."""

    def __init__(
        self, db: Database, *, consumer: str, clock: Clock, lease: timedelta, poll: timedelta,
        backoff: Callable[[BaseException, int], timedelta], batch: int = 50,
    ) -> None:
        self._db, self._consumer, self._clock = db, consumer, clock
        self._lease, self._poll, self._backoff, self._batch = lease, poll, backoff, batch

    def _record(self, raw: Any, meta: RecordMeta, *, attempts: int, code: str, reason: str,
                message_id: str | None = None) -> ParkedRecord:
        tenant, message = _identity(raw.value, meta, message_id)
        return ParkedRecord(
            tenant_id=tenant, consumer=self._consumer, message_id=message, topic=meta.topic,
            partition=meta.partition, offset=meta.offset, timestamp_ms=meta.timestamp_ms, key=raw.key,
            value=raw.value or b"", headers=dict(meta.headers), attempts=attempts, error_code=code, reason=reason)

    async def park(self, raw: Any, meta: RecordMeta, exc: BaseException, *, attempts: int, delay: timedelta) -> bool:
        """Keep the record to be tried again after ``delay``; False if the store could not take it."""
        now = self._clock.now()
        parked = self._record(raw, meta, attempts=attempts, code=error_code(exc), reason=_reason(exc))
        try:
            async with self._db.transaction() as conn:
                await store.park(conn, parked, at=now, due_at=now + delay)
        except Exception as park_failure:  # the store is down too: the record stays where it is
            log.warning("consumer %s: could not park %s@%d:%d: %r", self._consumer, meta.topic, meta.partition,
                        meta.offset, park_failure)
            return False
        return True

    async def keep_dead_letter(self, raw: Any, meta: RecordMeta, letter: DeadLetter) -> None:
        """The store's copy of a dead letter (the DLQ topic may be forgotten by its broker)."""
        dead = self._record(raw, meta, attempts=1, code=letter.error_code, reason=letter.reason,
                            message_id=letter.original_message_id)
        async with self._db.transaction() as conn:
            await store.keep_dead_letter(conn, dead, at=self._clock.now())

    async def summary(self) -> ParkSummary:
        async with self._db.reader() as conn:
            return await store.summarize(conn, self._consumer, now=self._clock.now())

    async def run(self, stop: asyncio.Event, attempt: Attempt, *,
                  on_summary: Callable[[ParkSummary], None] | None = None) -> None:
        """Until ``stop``: every ``poll``, try the due parked records again, then report the park."""
        while not stop.is_set():
            try:
                read = await self._redrive(stop, attempt, summarize=on_summary is not None)
                if on_summary is not None:
                    on_summary(read if read is not None else await self.summary())
            except Exception as exc:  # a worker loop: the rows stay in the store for the next round
                log.warning("consumer %s: re-drive of parked records failed: %r", self._consumer, exc)
            with suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), self._poll.total_seconds())

    async def _redrive(self, stop: asyncio.Event, attempt: Attempt, *, summarize: bool = False) -> ParkSummary | None:
        """Try the due parked records again. A poll that finds none (most do) also reads the park's
        summary, with ``summarize``, in the same reader, and returns it; else None."""
        async with self._db.reader() as conn:  # no write lock on a poll that finds nothing
            due = await store.find_due(conn, self._consumer, now=self._clock.now(), limit=self._batch)
            if not due:
                return await store.summarize(conn, self._consumer, now=self._clock.now()) if summarize else None
        for parked in due:
            if stop.is_set():
                break
            async with self._db.transaction() as conn:
                if not await store.claim(conn, parked, now=self._clock.now(), lease=self._lease):
                    continue  # another replica of this consumer has it
            await self._retry(parked, attempt)
        return None

    async def _retry(self, parked: ParkedRecord, attempt: Attempt) -> None:
        raw = StoredRecord.of(parked)
        try:
            await attempt(raw, record_meta(raw), parked.attempts)
        except Exception as exc:  # still failing: later, with a longer backoff
            delay = self._backoff(exc, parked.attempts)
            async with self._db.transaction() as conn:
                await store.reschedule(conn, parked.id, attempts=parked.attempts + 1,
                                       due_at=self._clock.now() + delay, error_code=error_code(exc),
                                       reason=_reason(exc))
            return
        async with self._db.transaction() as conn:
            await store.unpark(conn, parked.id)
