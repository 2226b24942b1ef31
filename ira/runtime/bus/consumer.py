"""The consumer runner every role uses: at-least-once in, exactly-once effect via the inbox.

For each record: parse the envelope, then in ONE database transaction remember its
``message_id`` in the inbox and run the handler; only after that transaction committed is
the Kafka offset committed. A crash anywhere in between redelivers the record and the inbox
drops it. The error's class decides the rest (``record.disposition``):

* poison (unparseable, a DomainError, a value the database refuses) -> a DeadLetter on the
  DLQ topic (and kept in the store) after that one try, then the offset moves on: one bad
  record never blocks its partition;
* DuplicateMessageError -> acknowledged and dropped;
* TransientError -> the same record again, with capped exponential backoff, while the
  fetched batch of its partition has waited less than ``max_hold`` in all (shared by the
  batch's records: a run of bad records holds it once, not once each); then the record is parked in the store
  (:mod:`ira.runtime.bus.park`) and tried again from there, and the partition moves on.
  Never skipped: if even parking fails (the store is down), it stays in place.

``inbox=False`` serves handlers that dedupe by other means (step wake-ups dedupe by the step
claim): the handler gets no connection and opens its own transactions.

``batch_size > 1`` applies up to that many already-fetched records of a partition in one
transaction: one commit instead of N is what lets one consumer keep up with ~1,000 events/s.
If anything in the batch fails, the batch rolls back and its records go one by one.

Records marked urgent (a new group's first alert) are applied before the rest of their fetch,
unless an earlier fetched record has their key; the in-order pass drops them by the inbox.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager, suppress
from datetime import timedelta
from typing import Any, cast

from aiokafka import AIOKafkaConsumer, ConsumerRebalanceListener, TopicPartition
from aiokafka.errors import KafkaError
from opentelemetry.trace import Span, Tracer

from ira.core.clock import Clock, SystemClock
from ira.core.envelope import Envelope
from ira.core.errors import BrokerUnavailableError, InvalidMessageError
from ira.runtime.bus import tracing
from ira.runtime.bus.inbox import BatchHooks, BatchItemError, InboxApplier
from ira.runtime.bus.options import ConsumerSettings, after_apply
from ira.runtime.bus.pace import FetchPace
from ira.runtime.bus.pack import through, unpacked
from ira.runtime.bus.park import Hold, ParkingLot
from ira.runtime.bus.producer import BusProducer
from ira.runtime.bus.record import (
    ConsumerStats,
    Disposition,
    InboxHandler,
    Outcome,
    PlainHandler,
    RecordMeta,
    RecordOutcome,
    dead_letter,
    dead_letter_headers,
    disposition,
    error_code,
    record_meta,
    retry_delay,
    span_attributes,
)
from ira.runtime.duty import Duty, enlist
from ira.runtime.fault import FaultPoints
from ira.runtime.store.database import Database
from ira.runtime.store.outbox import URGENT_HEADER
from ira.runtime.store.parked import ParkSummary

log = logging.getLogger(__name__)
__all__ = ["ConsumerRunner", "ConsumerSettings", "after_apply"]

_REFUSED = frozenset({Outcome.DEAD_LETTERED, Outcome.PARKED})
_DROPPED = {Disposition.DROP_DUPLICATE: Outcome.DUPLICATE, Disposition.DROP_STALE: Outcome.STALE}


def _ms(delta: timedelta) -> int:
    return int(delta.total_seconds() * 1000)


def can_set_fetch_wait(consumer: AIOKafkaConsumer) -> bool:
    """Whether :func:`set_fetch_wait` can reach ``consumer``'s fetcher (a started consumer's)."""
    return hasattr(getattr(consumer, "_fetcher", None), "_fetch_max_wait_ms")


def set_fetch_wait(consumer: AIOKafkaConsumer, wait: timedelta) -> None:
    """The wait of ``consumer``'s next fetches (the one in flight keeps its own). aiokafka reads
    its fetcher's ``_fetch_max_wait_ms`` for every fetch request it builds and offers no setter;
    ``tests/runtime/test_bus.py`` fails if an upgrade moves it."""
    consumer._fetcher._fetch_max_wait_ms = _ms(wait)


class ConsumerRunner:
    """Consumes ``topics`` as one member of ``group_id`` until the stop event is set.

    ``name`` is the inbox's consumer name: two roles reading one topic need two names.
    ``on_outcome`` hears every outcome (telemetry counts them); ``stats`` keeps totals.
    ``batch_hooks`` (inbox mode) run at the start and the end of every transaction.
    With ``db`` (inbox or not) failing records are parked in the store and dead letters kept
    there; ``on_parked`` hears the consumer's park (parked, oldest age, dead letters) each poll.
    """

    def __init__(
        self,
        *,
        bootstrap: str,
        group_id: str,
        topics: Sequence[str],
        name: str,
        handler: InboxHandler | PlainHandler,
        producer: BusProducer,
        dlq_topic: str,
        db: Database | None = None,
        inbox: bool = True,
        settings: ConsumerSettings = ConsumerSettings(),
        clock: Clock | None = None,
        tracer: Tracer | None = None,
        on_outcome: Callable[[RecordOutcome], None] | None = None,
        on_lag: Callable[[dict[tuple[str, int], int]], None] | None = None,
        batch_hooks: BatchHooks | None = None,
        on_parked: Callable[[ParkSummary], None] | None = None,
    ) -> None:
        if inbox and db is None:
            raise ValueError("a consumer with an inbox needs the database")
        self.bootstrap, self.group_id, self.topics, self.name = bootstrap, group_id, list(topics), name
        self._producer, self._dlq_topic = producer, dlq_topic
        self._plain = cast(PlainHandler, handler)  # used only when there is no inbox
        self.settings, self._tracer, self._on_outcome = settings, tracer or tracing.bus_tracer(), on_outcome
        self._applier = None if db is None or not inbox else InboxApplier(
            db, consumer=name, handler=cast(InboxHandler, handler), clock=clock or SystemClock(), span=self._span,
            hooks=batch_hooks)
        self._on_lag, self._on_parked = on_lag, on_parked
        self.parking = None if db is None else ParkingLot(
            db, consumer=name, clock=clock or SystemClock(), lease=settings.park_lease, poll=settings.park_poll,
            backoff=self._retry_delay)
        self.stats = ConsumerStats()
        self._contexts = tracing.ConsumedContexts()
        self._consumer: AIOKafkaConsumer | None = None
        self.pace: FetchPace | None = None
        """While running with ``settings.idle_fetch_wait``: its fetch wait now (:mod:`~ira.runtime.bus.pace`)."""
        self._faults, self._after_apply = FaultPoints(settings.faults), after_apply(name)

    async def run(self, stop: asyncio.Event) -> None:
        """Join the group, consume until ``stop``, then finish the current record, commit, leave.

        Reports to the supervisor's roster (:mod:`ira.runtime.duty`): ready once the group
        assigned it partitions, idle while its fetches come back empty.
        """
        duty = enlist(f"consumer {self.name}")
        consumer = self._consumer = await self._start_consumer(duty)
        redrive = None if self.parking is None else asyncio.create_task(
            self.parking.run(stop, self._attempt_reported, on_summary=self._on_parked))
        loop = asyncio.get_running_loop()
        pace = self.pace = self._pace(consumer, loop.time())
        try:
            while not stop.is_set():
                fetched = {tp: unpacked(records) for tp, records in (await self._fetch(consumer, stop)).items()}
                if pace is not None and (wait := pace.after_fetch(bool(fetched), loop.time())) is not None:
                    set_fetch_wait(consumer, wait)
                duty.report(idle=not fetched)
                await self._apply_urgent(fetched)
                for tp, records in fetched.items():
                    await self._commit(consumer, tp, await self._process_partition(records, stop))
                    duty.report(idle=False, done=len(records))
                    if stop.is_set():
                        break
                if self._on_lag is not None:  # after the commits, and on idle rounds: an idle partition reads 0
                    self._on_lag(self.lag())
        finally:
            duty.finished = True
            self._consumer = None
            await _ended(redrive)
            await consumer.stop()  # leaves the group, so its partitions move on at once

    def _pace(self, consumer: AIOKafkaConsumer, now: float) -> FetchPace | None:
        """The fetch pace, if ``settings.idle_fetch_wait`` is longer than ``fetch_wait``. A
        performance measure only: without a fetcher it can reach, the consumer keeps its wait."""
        s = self.settings
        if s.idle_fetch_wait is None or s.idle_fetch_wait <= s.fetch_wait:
            return None
        if not can_set_fetch_wait(consumer):
            log.warning("consumer %s: aiokafka's fetch wait cannot be set; it stays %s", self.name, s.fetch_wait)
            return None
        return FetchPace(busy_wait=s.fetch_wait, idle_wait=s.idle_fetch_wait, idle_after=s.idle_after,
                         quiet_since=now)

    def lag(self) -> dict[tuple[str, int], int]:
        """Per assigned (topic, partition): the partition's end (as last fetched) minus our commit."""
        consumer, lags = self._consumer, {}
        if consumer is None:
            return {}
        for tp in consumer.assignment():
            high, key = consumer.highwater(tp), (tp.topic, tp.partition)
            if high is not None:
                # a partition we never had to commit on was fetched to its end: nothing behind
                lags[key] = max(0, high - self.stats.committed.get(key, high))
        return lags

    async def _start_consumer(self, duty: Duty) -> AIOKafkaConsumer:
        s = self.settings
        consumer = AIOKafkaConsumer(
            bootstrap_servers=self.bootstrap, group_id=self.group_id, client_id=self.name,
            enable_auto_commit=False, auto_offset_reset="earliest", fetch_max_wait_ms=_ms(s.fetch_wait),
            session_timeout_ms=_ms(s.session_timeout), heartbeat_interval_ms=_ms(s.heartbeat_interval),
            request_timeout_ms=max(_ms(s.request_timeout), _ms(s.session_timeout) + 1000),
        )
        try:
            await consumer.start()
            consumer.subscribe(self.topics, listener=_ReportAssigned(duty))
        except (KafkaError, OSError) as exc:
            await consumer.stop()
            raise BrokerUnavailableError(f"kafka at {self.bootstrap}: {type(exc).__name__}: {exc}") from exc
        return consumer

    async def _fetch(self, consumer: AIOKafkaConsumer, stop: asyncio.Event) -> dict[TopicPartition, list[Any]]:
        """The next records: those already fetched, else the first fetch that brings some, the
        stop, or ``idle_wake`` (``fetch_wait`` if longer), whichever comes first. A fetch that
        brings records wakes the wait at once, so the loop comes round per fetch only while
        records come; idle, it came round per fetch wait (50 times a second for the run
        requests' 20 ms), its gauges and bookkeeping each time. A fetch error (broker
        restarting, topic recreated) waits, then empty."""
        max_records = self.settings.max_records
        try:
            fetched = await consumer.getmany(timeout_ms=0, max_records=max_records)
            if fetched or stop.is_set():
                return fetched
            fetch_wait = self.pace.wait if self.pace is not None else self.settings.fetch_wait
            wait_ms = _ms(max(fetch_wait, self.settings.idle_wake))
            waiting = asyncio.ensure_future(consumer.getmany(timeout_ms=wait_ms, max_records=max_records))
            stopped = asyncio.ensure_future(stop.wait())
            try:
                await asyncio.wait((waiting, stopped), return_when=asyncio.FIRST_COMPLETED)
            finally:
                stopped.cancel()
                if not waiting.done():
                    waiting.cancel()  # it drained nothing: what its fetch brings stays for the next call
            return waiting.result() if waiting.done() and not waiting.cancelled() else {}
        except KafkaError as exc:
            log.warning("consumer %s: fetch failed: %r", self.name, exc)
            await _stopped_within(stop, self.settings.retry_backoff * 10)
            return {}

    async def _commit(self, consumer: AIOKafkaConsumer, tp: TopicPartition, last: int | None) -> None:
        """Commit after ``last``; a failure (rebalance, broker down) only means redelivery."""
        if last is None:
            return
        self._faults.hit(self._after_apply)
        try:
            await consumer.commit({tp: last + 1})
        except KafkaError as exc:
            self.stats.commit_failures += 1
            log.warning("consumer %s: commit of %s@%d failed: %r", self.name, tp, last + 1, exc)
            return
        self.stats.committed[(tp.topic, tp.partition)] = last + 1

    async def _process_partition(self, records: Sequence[Any], stop: asyncio.Event) -> int | None:
        """Apply records in order; return the offset of the last one done (None if none).

        Batches of ``batch_size``; a batch that fails is narrowed down rather than taken apart:
        when the failing record is known (its handler raised, or it does not parse) the records
        before it were applied as a batch, it goes alone, the rest as a batch again (after a
        record refused alone, the next goes alone too: bad records come in runs); when it is
        not known (a batch hook failed) the batch is split in halves, each tried as a batch. A
        few bad records cost a few transactions each, not one per record of their batch.
        """
        last: int | None = None
        size, hold = (self.settings.batch_size if self._applier else 1), Hold(self.settings.max_hold)
        pending = [records[start:start + size] for start in range(0, len(records), size)]
        while pending and not stop.is_set():
            chunk = pending.pop(0)
            if len(chunk) == 1:
                outcome = await self._process(chunk[0], stop, hold)
                if outcome is None:
                    return last
                last = through(chunk[0])
                if pending and outcome in _REFUSED:
                    head = pending.pop(0)  # bad records come in runs: the next one goes alone too
                    pending[:0] = [part for part in (head[:1], head[1:]) if part]
                continue
            done, known = await self._apply_batch(chunk)
            if done:
                last = through(chunk[done - 1])
            rest = chunk[done:]
            split = 1 if known else len(rest) // 2
            pending[:0] = [part for part in (rest[:split], rest[split:]) if part]
        return last

    async def _process(self, record: Any, stop: asyncio.Event, hold: Hold) -> Outcome | None:
        """Try one record until it has an outcome (or is parked); None if ``stop`` came while retrying."""
        meta = record_meta(record)
        for attempt in itertools.count():
            try:
                outcome = await self._attempt(record, meta, attempt)
            except Exception as exc:  # the worker loop: only retryable failures reach here
                self._report(RecordOutcome(self.name, Outcome.RETRIED, meta, error_code(exc)))
                delay = self._retry_delay(exc, attempt)
                if hold.exceeded_by(delay) and await self._park(record, meta, exc, attempt + 1, delay):
                    return Outcome.PARKED
                if await self._wait_to_retry(exc, meta, attempt, delay, stop):
                    return None
                hold.spend(delay)
                continue
            self._report(outcome)
            return outcome.outcome
        raise AssertionError("unreachable: itertools.count() never ends")

    def _retry_delay(self, exc: BaseException, attempt: int) -> timedelta:
        return retry_delay(exc, attempt, base=self.settings.retry_backoff, cap=self.settings.max_retry_backoff)

    async def _park(self, record: Any, meta: RecordMeta, exc: Exception, attempts: int, delay: timedelta) -> bool:
        """Out of the partition into the store, to be tried again after ``delay``."""
        if self.parking is None or not await self.parking.park(record, meta, exc, attempts=attempts, delay=delay):
            return False
        log.warning("consumer %s: %s@%d:%d parked after %d tries (%s), the partition moves on", self.name,
                    meta.topic, meta.partition, meta.offset, attempts, error_code(exc))
        self._report(RecordOutcome(self.name, Outcome.PARKED, meta, error_code(exc)))
        return True

    async def _attempt_reported(self, record: Any, meta: RecordMeta, attempt: int) -> RecordOutcome:
        """One try of a parked record; its outcome is reported like any other."""
        try:
            outcome = await self._attempt(record, meta, attempt)
        except Exception as exc:
            self._report(RecordOutcome(self.name, Outcome.RETRIED, meta, error_code(exc)))
            raise
        self._report(outcome)
        return outcome

    async def _wait_to_retry(
        self, exc: Exception, meta: RecordMeta, attempt: int, delay: timedelta, stop: asyncio.Event
    ) -> bool:
        """Back off before the next try; True if ``stop`` was set meanwhile."""
        log.warning("consumer %s: %s@%d:%d try %d failed, again in %.2fs: %r", self.name, meta.topic,
                    meta.partition, meta.offset, attempt + 1, delay.total_seconds(), exc)
        return await _stopped_within(stop, delay)

    async def _attempt(self, record: Any, meta: RecordMeta, attempt: int) -> RecordOutcome:
        """One try: parse, apply, and settle whatever is not worth retrying."""
        try:
            envelope = Envelope.from_bytes(record.value)
        except InvalidMessageError as exc:
            return await self._dead_letter(record, meta, exc, None)
        try:
            return RecordOutcome(self.name, await self._apply(envelope, meta), meta)
        except Exception as exc:
            kind = disposition(exc, attempt=attempt, max_unexpected_attempts=self.settings.max_unexpected_attempts)
            if kind is Disposition.RETRY:
                raise
            if kind is Disposition.DEAD_LETTER:
                return await self._dead_letter(record, meta, exc, envelope)
            return RecordOutcome(self.name, _DROPPED[kind], meta, error_code(exc))

    async def _apply_urgent(self, fetched: Mapping[TopicPartition, Sequence[Any]]) -> None:
        """Apply the fetched records marked urgent (``outbox.URGENT_HEADER``: a new group's first
        alert behind a storm's backlog) before the rest, in one transaction; each only if no
        earlier fetched record of its partition has its key, so per-key order holds. The
        in-order pass then finds their inbox rows (reported once more, as duplicates) and
        commits the offsets as ever. A failure here changes nothing: the in-order pass applies
        them with its retries, parking and dead letters."""
        if self._applier is None:
            return
        items: list[tuple[Envelope, RecordMeta]] = []
        for records in fetched.values():
            keys: set[bytes | None] = set()
            for record in records:
                if record.key not in keys and any(name == URGENT_HEADER for name, _ in record.headers or ()):
                    with suppress(InvalidMessageError):  # poison: the in-order pass dead-letters it
                        items.append((Envelope.from_bytes(record.value), record_meta(record)))
                keys.add(record.key)
        if not items:
            return
        try:
            outcomes = await self._applier.apply(items)
        except Exception as exc:
            log.debug("consumer %s: %d urgent record(s) left to the in-order pass: %r", self.name, len(items), exc)
            return
        for outcome, (_, meta) in zip(outcomes, items, strict=True):
            self._report(RecordOutcome(self.name, outcome, meta))

    async def apply_local(self, envelope: Envelope, *, topic: str, key: str | None) -> Outcome:
        """Apply a message this process just committed to its outbox, before the broker delivers
        it (eager hand-over, inbox mode only): the same inbox row, handler and span as the
        broker's copy, which then finds the inbox row and is dropped as a duplicate. A failure
        is raised and leaves nothing behind (the transaction rolls back): the broker's copy
        applies the message as if this never happened."""
        if self._applier is None:
            raise ValueError(f"consumer {self.name} has no inbox: a local copy could not be deduplicated")
        meta = RecordMeta(topic=topic, partition=-1, offset=-1, key=key, headers={},
                          timestamp_ms=int(envelope.occurred_at.timestamp() * 1000))
        outcome = (await self._applier.apply([(envelope, meta)]))[0]
        self._report(RecordOutcome(self.name, outcome, meta))
        return outcome

    async def _apply(self, envelope: Envelope, meta: RecordMeta) -> Outcome:
        if self._applier is not None:
            return (await self._applier.apply([(envelope, meta)]))[0]
        with self._span(envelope, meta):
            await self._plain(envelope, meta)
        return Outcome.PROCESSED

    async def _apply_batch(self, records: Sequence[Any]) -> tuple[int, bool]:
        """As many of ``records`` as apply together, in one transaction: (how many from the start
        were applied, whether the record after them is known to be the one that failed)."""
        items = _parsed_prefix(records)
        known = len(items) < len(records)  # the record after the prefix does not parse: poison
        if not items:
            return 0, known
        try:
            if await self._apply_items(items, locate=True):
                return len(items), known
            return 0, False  # it failed outside any one record (a batch hook): split it
        except BatchItemError as failed:  # nothing was written: those before it again, then it alone
            before = items[:failed.index]
            if before and not await self._apply_items(before, locate=False):
                return 0, False
            return len(before), True

    async def _apply_items(self, items: Sequence[tuple[Envelope, RecordMeta]], *, locate: bool) -> bool:
        """``items`` in one transaction and their outcomes reported; False if anything failed
        (a :class:`BatchItemError` with ``locate``)."""
        assert self._applier is not None  # batches exist only in inbox mode
        try:
            outcomes = await self._applier.apply(items, locate=locate)
        except BatchItemError:
            raise
        except Exception as exc:  # any other failure: one by one, where each record gets classified
            log.debug("consumer %s: batch of %d failed, it is narrowed down: %r", self.name, len(items), exc)
            return False
        for outcome, (_, meta) in zip(outcomes, items, strict=True):
            self._report(RecordOutcome(self.name, outcome, meta))
        return True

    async def _dead_letter(
        self, record: Any, meta: RecordMeta, exc: BaseException, envelope: Envelope | None
    ) -> RecordOutcome:
        """Keep the refused record in the store, publish it to the DLQ keyed like the original; move on."""
        letter = dead_letter(record.value, meta, exc, consumer=self.name, envelope=envelope)
        if self.parking is not None:
            await self.parking.keep_dead_letter(record, meta, letter)
        await self._producer.publish_raw(self._dlq_topic, record.key, letter.model_dump_json().encode(),
                                         dead_letter_headers(meta, letter))
        log.warning("consumer %s: %s@%d:%d dead-lettered (%s): %s", self.name, meta.topic,
                    meta.partition, meta.offset, letter.error_code, letter.reason)
        return RecordOutcome(self.name, Outcome.DEAD_LETTERED, meta, letter.error_code)

    def _span(self, envelope: Envelope, meta: RecordMeta) -> AbstractContextManager[Span]:
        """The handler's span, child of the trace the record carries."""
        parent = self._contexts.parent(meta.headers, fallback_traceparent=envelope.traceparent)
        attributes = span_attributes(meta, envelope, group_id=self.group_id, consumer=self.name)
        return tracing.consume_span(self._tracer, f"{meta.topic} process", parent=parent, attributes=attributes)

    def _report(self, outcome: RecordOutcome) -> None:
        self.stats.count(outcome.outcome)
        if self._on_outcome is not None:
            self._on_outcome(outcome)


class _ReportAssigned(ConsumerRebalanceListener):  # type: ignore[misc]
    """Marks the duty ready when the group has assigned this member its partitions (possibly
    none: a replica beyond the partition count is still a running member of its group)."""

    def __init__(self, duty: Duty) -> None:
        self._duty = duty

    def on_partitions_revoked(self, revoked: object) -> None:
        """Nothing to do: offsets are committed after each transaction, not at rebalance."""

    def on_partitions_assigned(self, assigned: object) -> None:
        self._duty.ready = True


def _parsed_prefix(records: Sequence[Any]) -> list[tuple[Envelope, RecordMeta]]:
    """The envelopes of ``records`` up to the first that does not parse."""
    items = []
    for record in records:
        try:
            items.append((Envelope.from_bytes(record.value), record_meta(record)))
        except InvalidMessageError:
            break
    return items


async def _ended(task: asyncio.Task[None] | None) -> None:
    """Wait for a side task that ends with the stop event (cancel it if the loop ended otherwise)."""
    if task is None:
        return
    if not task.done():
        task.cancel()
    with suppress(asyncio.CancelledError):
        await task


async def _stopped_within(stop: asyncio.Event, delay: timedelta) -> bool:
    """Wait ``delay`` unless ``stop`` is set first; True if it was."""
    try:
        await asyncio.wait_for(stop.wait(), delay.total_seconds())
    except TimeoutError:
        return False
    return True
