"""Consumed records' parent contexts, extracted once per distinct trace header value
(:class:`ira.runtime.bus.tracing.ConsumedContexts`), and the CONSUMER span run in them."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest
from opentelemetry import baggage, propagate, trace
from opentelemetry.propagators.composite import CompositePropagator
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode, Tracer
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
from sqlalchemy.ext.asyncio import AsyncConnection

from ira.core.commit import OutboxMessage
from ira.core.envelope import Envelope, Topic, topic_name
from ira.core.ids import new_event_id
from ira.infra.tansu import EmbeddedKafka
from ira.runtime.bus import tracing
from ira.runtime.bus.consumer import ConsumerRunner, ConsumerSettings
from ira.runtime.bus.producer import BusProducer
from ira.runtime.bus.record import RecordMeta
from ira.runtime.store.database import Database
from tests.eventually import eventually


def traceparent(n: int) -> tuple[str, str, str]:
    """A distinct sampled W3C header for ``n``: (header, trace id, span id)."""
    trace_id, span_id = f"{n + 1:032x}", f"{n + 1:016x}"
    return f"00-{trace_id}-{span_id}-01", trace_id, span_id


def parent_ids(ctx: object) -> tuple[str, str]:
    span = trace.get_current_span(ctx).get_span_context()  # type: ignore[arg-type]
    return f"{span.trace_id:032x}", f"{span.span_id:016x}"


@pytest.fixture
def recorded() -> Iterator[tuple[InMemorySpanExporter, Tracer]]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    yield exporter, provider.get_tracer("test")
    provider.shutdown()


def test_records_sharing_a_header_share_one_extracted_parent() -> None:
    contexts = tracing.ConsumedContexts()
    header, trace_id, span_id = traceparent(1)
    first = contexts.parent({"traceparent": header, "event_id": "a"})
    again = contexts.parent({"traceparent": header, "event_id": "b"})  # other headers do not matter

    assert again is first and len(contexts) == 1
    assert parent_ids(first) == (trace_id, span_id)
    assert trace.get_current_span(first).get_span_context().is_remote


def test_a_distinct_header_gives_a_distinct_parent_and_the_cache_stays_bounded() -> None:
    contexts = tracing.ConsumedContexts(size=4)
    for n in range(10):
        header, trace_id, span_id = traceparent(n)
        assert parent_ids(contexts.parent({"traceparent": header})) == (trace_id, span_id)
        assert len(contexts) <= 4
    header, trace_id, span_id = traceparent(0)  # dropped long ago: extracted again, still right
    assert parent_ids(contexts.parent({"traceparent": header})) == (trace_id, span_id)
    assert len(contexts) == 4


def test_the_envelope_traceparent_is_the_fallback_and_a_header_wins() -> None:
    contexts = tracing.ConsumedContexts()
    header, trace_id, span_id = traceparent(1)
    fallback, fallback_trace, fallback_span = traceparent(2)

    assert parent_ids(contexts.parent({}, fallback_traceparent=fallback)) == (fallback_trace, fallback_span)
    assert parent_ids(contexts.parent({"traceparent": header}, fallback_traceparent=fallback)) == (trace_id, span_id)
    assert not trace.get_current_span(contexts.parent({})).get_span_context().is_valid  # no trace: a root


def test_baggage_is_part_of_what_is_cached_on() -> None:
    contexts = tracing.ConsumedContexts()
    header, _, _ = traceparent(1)
    plain = contexts.parent({"traceparent": header})
    with_baggage = contexts.parent({"traceparent": header, "baggage": "tenant=acme"})

    assert with_baggage is not plain
    assert propagate.get_global_textmap().fields >= {"traceparent", "baggage"}
    assert dict(baggage.get_all(with_baggage)) == {"tenant": "acme"}


def test_a_propagator_installed_later_is_used(monkeypatch: pytest.MonkeyPatch) -> None:
    contexts = tracing.ConsumedContexts()
    header, trace_id, span_id = traceparent(1)
    contexts.parent({"traceparent": header})
    monkeypatch.setattr(propagate, "get_global_textmap",
                        lambda: CompositePropagator([TraceContextTextMapPropagator()]))

    assert parent_ids(contexts.parent({"traceparent": header})) == (trace_id, span_id)
    assert len(contexts) == 1  # emptied when the propagator changed


def test_consume_span_is_current_inside_child_of_the_parent_and_records_a_failure(
    recorded: tuple[InMemorySpanExporter, Tracer],
) -> None:
    exporter, tracer = recorded
    header, trace_id, span_id = traceparent(1)
    parent = tracing.ConsumedContexts().parent({"traceparent": header})
    before = trace.get_current_span()
    with tracing.consume_span(tracer, "t process", parent=parent, attributes={"a": 1}) as span:
        assert trace.get_current_span() is span
    with pytest.raises(ValueError), tracing.consume_span(tracer, "t process", parent=parent):
        raise ValueError("refused")

    assert trace.get_current_span() is before  # the context is restored after each
    ok, failed = exporter.get_finished_spans()
    for finished in (ok, failed):
        assert finished.kind is SpanKind.CONSUMER and finished.parent is not None
        assert (f"{finished.parent.trace_id:032x}", f"{finished.parent.span_id:016x}") == (trace_id, span_id)
    assert (ok.attributes or {})["a"] == 1 and ok.status.status_code is StatusCode.UNSET
    assert failed.status.status_code is StatusCode.ERROR
    assert [e.name for e in failed.events] == ["exception"]


async def test_each_consumed_record_runs_in_a_span_child_of_its_own_header(
    kafka: EmbeddedKafka, bus_env: str, db: Database, recorded: tuple[InMemorySpanExporter, Tracer]
) -> None:
    """A batch (one transaction) mixing two requests' traces: every record's span has its own
    request's parent, however many records share it."""
    exporter, tracer = recorded
    topic = topic_name(Topic.ALERTS, bus_env)
    headers = [traceparent(n) for n in range(2)]
    envelopes = [Envelope(message_id=new_event_id(), type="test.event", tenant_id="acme",
                          occurred_at=datetime.now(UTC), traceparent=headers[n][0], payload={})
                 for n in (0, 0, 1, 0, 1)]
    sent = {e.message_id: headers[int(e.traceparent == headers[1][0])] for e in envelopes}
    seen: dict[str, trace.SpanContext] = {}

    async def handle(conn: AsyncConnection, env: Envelope, meta: RecordMeta) -> None:
        seen[env.message_id] = trace.get_current_span().get_span_context()

    async with BusProducer(kafka.bootstrap, request_timeout=timedelta(seconds=2)) as producer:
        await producer.publish_many([OutboxMessage(topic=topic, key="acme:fp-1", envelope=e) for e in envelopes])
        consumer = ConsumerRunner(
            bootstrap=kafka.bootstrap, group_id=f"g-{uuid.uuid4().hex[:8]}", name="contexts-test", handler=handle,
            topics=[topic], producer=producer, dlq_topic=topic_name(Topic.DLQ, bus_env), db=db, tracer=tracer,
            settings=replace(ConsumerSettings(session_timeout=timedelta(seconds=2),
                                              fetch_wait=timedelta(milliseconds=100)), batch_size=10))
        stop = asyncio.Event()
        task = asyncio.create_task(consumer.run(stop))
        try:
            await eventually(lambda: len(seen) == len(sent))
        finally:
            stop.set()
            await asyncio.wait_for(task, 15)

    spans = {(s.attributes or {})["messaging.message.id"]: s for s in exporter.get_finished_spans()
             if s.kind is SpanKind.CONSUMER}
    for message_id, (_, trace_id, span_id) in sent.items():
        span = spans[message_id]
        assert span.parent is not None
        assert (f"{span.parent.trace_id:032x}", f"{span.parent.span_id:016x}") == (trace_id, span_id)
        assert seen[message_id].span_id == span.context.span_id  # the handler ran inside it
