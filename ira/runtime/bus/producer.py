"""The producer every role shares: acks from all in-sync replicas, errors in ira's terms.

Tracing is the bus's own: every publish call is one PRODUCER span (a batch is one span, not
one per record), and a record without a ``traceparent`` of its own carries that span's, so
the consumer's span continues the trace (:mod:`ira.runtime.bus.tracing`). aiokafka's
auto-instrumentation is not used: it made a span and a second header injection per record,
18 % of the webhook's CPU.

A publish returns only after the broker acknowledged it, because callers act on that answer:
the webhook returns 202 only for an acknowledged alert, the relay marks a row sent only
after its ack. Any failure becomes :class:`BrokerUnavailableError` (a TransientError), so
callers never import aiokafka. Request timeouts are short on purpose: with the broker down
the gateway must answer 503 within seconds, not after aiokafka's 40 s default.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Container, Mapping, Sequence
from contextlib import AbstractContextManager, asynccontextmanager
from dataclasses import dataclass
from datetime import timedelta
from types import TracebackType
from typing import Any

from aiokafka import AIOKafkaProducer
from aiokafka.errors import KafkaError
from aiokafka.partitioner import DefaultPartitioner
from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.trace import Link, Span, SpanKind, Status, StatusCode, Tracer

from ira.core.commit import OutboxMessage
from ira.core.envelope import Envelope
from ira.core.errors import BrokerUnavailableError
from ira.core.ports import RawRecord
from ira.runtime.bus import pack as packing
from ira.runtime.bus import tracing
from ira.runtime.store.outbox import envelope_headers


@dataclass(frozen=True)
class Published:
    """Where the broker stored a record."""

    topic: str
    partition: int
    offset: int


def kafka_headers(headers: Mapping[str, str]) -> list[tuple[str, bytes]]:
    """aiokafka's header shape: a list of ``(str, bytes)`` pairs."""
    return [(key, value.encode()) for key, value in headers.items()]


def _with_traceparent(headers: Mapping[str, str], traceparent: str | None) -> list[tuple[str, bytes]]:
    """The stored headers; the given ``traceparent`` only if they carry none."""
    return kafka_headers(_with_traceparent_map(headers, traceparent))


def _with_traceparent_map(headers: Mapping[str, str], traceparent: str | None) -> Mapping[str, str]:
    if traceparent and tracing.TRACEPARENT not in headers:
        return {**headers, tracing.TRACEPARENT: traceparent}
    return headers


PACK_HEADER = "ira-pack"
"""On a pack record: how many members it holds (readers tell a pack by its value's bytes)."""
_PARTITIONER = DefaultPartitioner()


@dataclass(frozen=True, slots=True)
class _Outgoing:
    """One record to send, and the indices of the stored records it carries."""

    topic: str
    key: str | None
    value: bytes
    headers: list[tuple[str, bytes]]
    partition: int | None
    indices: tuple[int, ...]


def _envelope_headers(envelope: Envelope, extra: Mapping[str, str] | None, traceparent: str | None
                      ) -> list[tuple[str, bytes]]:
    """DESIGN.md §5 headers; ``traceparent`` (the producer span's) when the envelope carries none."""
    headers = envelope_headers(envelope)
    if extra:
        headers.update(extra)
    if traceparent and tracing.TRACEPARENT not in headers:
        headers[tracing.TRACEPARENT] = traceparent
    return kafka_headers(headers)


class BusProducer:
    """One Kafka producer per process; ``start()`` before publishing, ``stop()`` at shutdown.

    ``enable_idempotence`` must stay False on the embedded broker (Tansu rejects
    InitProducerId v0); receivers dedupe by ``message_id`` anyway.
    """

    def __init__(
        self,
        bootstrap: str,
        *,
        enable_idempotence: bool = False,
        request_timeout: timedelta = timedelta(seconds=5),
        linger: timedelta = timedelta(0),
        client_id: str = "ira",
        tracer: Tracer | None = None,
    ) -> None:
        self.bootstrap = bootstrap
        self._enable_idempotence = enable_idempotence
        self._timeout = request_timeout
        self._linger = linger
        self._client_id = client_id
        self._producer: AIOKafkaProducer | None = None
        # One enqueuer at a time: when a partition's batch is full, aiokafka parks every sender in
        # a drain wait and wakes them all on each drain (quadratic under load). Behind this lock
        # only one waits there; acks are still awaited concurrently, outside it.
        self._enqueue = asyncio.Lock()
        self._tracer = tracer or tracing.bus_tracer()

    async def start(self) -> None:
        """Connect (fetch cluster metadata); BrokerUnavailableError if the broker is down."""
        producer = AIOKafkaProducer(
            bootstrap_servers=self.bootstrap, client_id=self._client_id, acks="all",
            enable_idempotence=self._enable_idempotence, linger_ms=int(self._linger.total_seconds() * 1000),
            request_timeout_ms=int(self._timeout.total_seconds() * 1000),
        )
        try:
            async with self._translated("connect"):
                await producer.start()
        except BrokerUnavailableError:
            await producer.stop()
            raise
        self._producer = producer

    async def stop(self) -> None:
        """Flush what is pending and disconnect."""
        producer, self._producer = self._producer, None
        if producer is not None:
            await producer.stop()

    async def publish(
        self, topic: str, key: str, envelope: Envelope, *, headers: Mapping[str, str] | None = None
    ) -> Published:
        """Send one envelope and wait for the broker's acknowledgement."""
        return (await self.publish_many([OutboxMessage(topic=topic, key=key, envelope=envelope)], headers=headers))[0]

    async def publish_many(
        self, messages: Sequence[OutboxMessage], *, headers: Mapping[str, str] | None = None
    ) -> list[Published]:
        """Send all, then wait for all acks: one round of batching instead of N round trips.

        If any fails the whole call raises; the ones that succeeded may be sent again by the
        caller's retry, which receivers drop by ``message_id``.
        """
        [outcome] = await self.publish_together([(messages, tracing.current_context())], headers=headers)
        if isinstance(outcome, BrokerUnavailableError):
            raise outcome
        return outcome

    async def publish_together(
        self, batches: Sequence[tuple[Sequence[OutboxMessage], Context]], *, headers: Mapping[str, str] | None = None
    ) -> list[list[Published] | BrokerUnavailableError]:
        """Several callers' batches in one pass: each batch's outcome is its own (all acked, or
        the error), and each record continues its caller's trace (the given context).

        One PRODUCER span covers the pass, child of the first caller's context and linked to
        the others' (the messaging conventions' batch span).
        """
        messages = [m for batch, _ in batches for m in batch]
        if not messages:
            return [[] for _ in batches]
        parents = [trace.get_current_span(ctx).get_span_context() for _, ctx in batches]
        links = [Link(p) for p in parents[1:] if p.is_valid]
        with self._span(messages[0].topic, len(messages), batches[0][1], links=links) as span:
            own = tracing.traceparent(span.get_span_context())
            try:
                async with self._translated(f"{len(messages)} messages"):
                    pending = [await self._send(m.topic, m.key, m.envelope.to_bytes(),
                                                _envelope_headers(m.envelope, headers,
                                                                  tracing.traceparent(parent) or own))
                               for batch, parent in zip((b for b, _ in batches), parents, strict=True)
                               for m in batch]
                    results = await asyncio.gather(*pending, return_exceptions=True)
            except BrokerUnavailableError as exc:  # one error per caller: each raises its own
                span.set_status(Status(StatusCode.ERROR, exc.message))
                return [BrokerUnavailableError(exc.message, retry_after=exc.retry_after) for _ in batches]
        outcomes: list[list[Published] | BrokerUnavailableError] = []
        at = 0
        for batch, _ in batches:
            mine, at = results[at:at + len(batch)], at + len(batch)
            failures = [r for r in mine if isinstance(r, BaseException)]
            if failures:
                outcomes.append(BrokerUnavailableError(
                    f"{len(failures)} of {len(batch)} not acknowledged: {type(failures[0]).__name__}: {failures[0]}",
                    retry_after=timedelta(seconds=1)))
            else:
                outcomes.append([Published(r.topic, r.partition, r.offset) for r in mine])  # type: ignore[union-attr]
        return outcomes

    async def publish_raw(
        self,
        topic: str,
        key: str | bytes | None,
        value: bytes,
        headers: Mapping[str, str] | Sequence[tuple[str, bytes]],
    ) -> Published:
        """Send bytes as they are (the outbox relay's stored rows, dead letters).

        The PRODUCER span continues the trace the record carries (a relayed row's request), else
        the current one; a record without a ``traceparent`` gets the span's.
        """
        pairs = kafka_headers(headers) if isinstance(headers, Mapping) else list(headers)
        carried = any(name == tracing.TRACEPARENT for name, _ in pairs)
        with self._span(topic, 1, tracing.extract(pairs) if carried else tracing.current_context()):
            if not carried:
                tracing.inject(pairs)
            async with self._translated(topic):
                ack = await self._send(topic, key, value, pairs)
                meta = await ack
        return Published(meta.topic, meta.partition, meta.offset)

    async def publish_raw_many(self, records: Sequence[RawRecord], *, pack: Container[str] = frozenset()
                               ) -> list[Published | BrokerUnavailableError]:
        """Send stored records in one pass (the relay's batch): one PRODUCER span linked to the
        trace each record carries, every ack awaited at once; per record its own outcome.

        A record without a ``traceparent`` gets the span's. Compared with ``publish_raw`` per
        record, this saves a span, a context extraction and a separate ack wait per record.
        Records of a topic in ``pack`` go out as packs, one record per partition they are bound
        for (:mod:`ira.runtime.bus.pack`); each member's outcome is its pack's.
        """
        if not records:
            return []
        carried = [tracing.extract(kafka_headers(r.headers)) for r in records]
        links = [Link(c) for c in (trace.get_current_span(ctx).get_span_context() for ctx in carried) if c.is_valid]
        with self._span(records[0].topic, len(records), tracing.current_context(), links=links) as span:
            own = tracing.traceparent(span.get_span_context())
            try:
                async with self._translated(f"{len(records)} records"):
                    outgoing = await self._outgoing(records, pack, own)
                    pending = [await self._send(o.topic, o.key, o.value, o.headers, partition=o.partition)
                               for o in outgoing]
                    acks = await asyncio.gather(*pending, return_exceptions=True)
            except BrokerUnavailableError as exc:
                span.set_status(Status(StatusCode.ERROR, exc.message))
                return [BrokerUnavailableError(exc.message, retry_after=exc.retry_after) for _ in records]
        results: list[Any] = [None] * len(records)
        for o, ack in zip(outgoing, acks, strict=True):
            for i in o.indices:
                results[i] = ack
        return [BrokerUnavailableError(f"not acknowledged: {type(r).__name__}: {r}", retry_after=timedelta(seconds=1))
                if isinstance(r, BaseException) else Published(r.topic, r.partition, r.offset) for r in results]

    async def _outgoing(self, records: Sequence[RawRecord], pack: Container[str], traceparent: str | None
                        ) -> list[_Outgoing]:
        """The records to send for ``records``: each as it is, or packed per partition (in order)."""
        outgoing: list[_Outgoing] = []
        bound: dict[tuple[str, int], list[int]] = {}
        partitions: dict[str, list[int]] = {}  # per topic, asked of the producer's metadata once a pass
        for i, r in enumerate(records):
            if r.topic not in pack:
                outgoing.append(_Outgoing(r.topic, r.key, r.value, _with_traceparent(r.headers, traceparent),
                                          None, (i,)))
                continue
            if r.topic not in partitions:
                partitions[r.topic] = await self._partitions(r.topic)
            # the partition the producer's default partitioner would choose for this key alone
            bound.setdefault((r.topic, int(_PARTITIONER(r.key.encode(), partitions[r.topic], ()))), []).append(i)
        for (topic, partition), indices in bound.items():
            members = [packing.PackMember(key=records[i].key, value=records[i].value,
                                          headers=_with_traceparent_map(records[i].headers, traceparent))
                       for i in indices]
            at = 0
            for chunk in packing.packs(members):
                outgoing.append(_Outgoing(topic, chunk[0].key, packing.pack(chunk),
                                          [(PACK_HEADER, str(len(chunk)).encode())], partition,
                                          tuple(indices[at:at + len(chunk)])))
                at += len(chunk)
        return outgoing

    async def _partitions(self, topic: str) -> list[int]:
        """``topic``'s partitions in order (what the default partitioner indexes into)."""
        if self._producer is None:
            raise BrokerUnavailableError("producer is not started")
        return sorted(await self._producer.partitions_for(topic))

    def _span(self, topic: str, count: int, parent: Context, *, links: Sequence[Link] = ()
              ) -> AbstractContextManager[Span]:
        """One PRODUCER span per publish call (messaging semantic conventions)."""
        return self._tracer.start_as_current_span(
            f"publish {topic}", context=parent, kind=SpanKind.PRODUCER, links=links,
            attributes={"messaging.system": "kafka", "messaging.operation.type": "send",
                        "messaging.destination.name": topic, "messaging.batch.message_count": count})

    async def _send(
        self, topic: str, key: str | bytes | None, value: bytes, headers: list[tuple[str, bytes]], *,
        partition: int | None = None,
    ) -> asyncio.Future[Any]:
        """Queue one record; the returned future resolves with its RecordMetadata."""
        if self._producer is None:
            raise BrokerUnavailableError("producer is not started")
        raw_key = key.encode() if isinstance(key, str) else key
        async with self._enqueue:
            return await self._producer.send(topic, value=value, key=raw_key, headers=headers, partition=partition)

    @asynccontextmanager
    async def _translated(self, what: str) -> AsyncIterator[None]:
        """Bound the wait and turn aiokafka's errors into BrokerUnavailableError."""
        try:
            async with asyncio.timeout(self._timeout.total_seconds() * 2):
                yield
        except (KafkaError, OSError, TimeoutError) as exc:
            raise BrokerUnavailableError(
                f"kafka at {self.bootstrap} ({what}): {type(exc).__name__}: {exc}",
                retry_after=timedelta(seconds=1),
            ) from exc

    async def __aenter__(self) -> BusProducer:
        await self.start()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.stop()
