"""Traces and metrics: what an operator needs to see whether ira keeps up.

Tracing follows OpenTelemetry: one ``TracerProvider`` per process, exporting over OTLP/HTTP
only when ``otel_endpoint`` is configured (so ``ira dev`` on a laptop sends nothing anywhere).
The bus traces Kafka itself (:mod:`ira.runtime.bus.tracing`: a PRODUCER span per publish,
``traceparent`` in the record headers, a CONSUMER span per record that continues it); the
FastAPI app is instrumented in :mod:`ira.runtime.http`.

A process that exports nothing records nothing: its provider samples every span *out*
(``ALWAYS_OFF``), so the SDK hands back non-recording spans that still carry fresh, valid
trace and span ids. Runs keep their ``traceparent``, records carry it in their headers, logs
carry ``trace_id``/``span_id`` and the dashboard links a run to its trace as before; what is
saved is building, timing and ending a span object per record, publish and request that no
processor would ever see (a per-task profile of ``ira dev`` under load put them at ~8 % of
its CPU). Such a process propagates the W3C sampled flag as ``00``. Its provider is an
:class:`UnrecordedTracerProvider`: its tracers make those spans straight away (the parent's
trace or a new one, a new span id, the flags and trace state the SDK would give them) instead
of going through the SDK tracer's path for spans nobody records (the sampler's call and result,
its internal-metrics hook: ~10k instructions per consumed record). A process that does
export samples every span (``ALWAYS_ON``), whatever flag its parent came with: the flag says
whether the *sender* recorded, not whether the trace is wanted, so a mixed deployment
(``otel_endpoint`` set on some processes only) still exports the spans of those processes,
joined by the ids the others passed on.

Every exporter is wrapped in :class:`RedactingSpanExporter`: span names, attributes, event
attributes (recorded exceptions) and status descriptions pass the platform's one redactor
before they leave the process (DESIGN.md §9: secrets never enter traces).

Metrics live in a :class:`Metrics` object with its *own* registry rather than
prometheus_client's global one, so two apps in one test process never share counters and a
role can add its own metrics with ``metrics.registry``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from functools import cached_property
from typing import Any

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import SERVICE_NAME, Resource
from opentelemetry.sdk.trace import Event, ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.sdk.trace.id_generator import IdGenerator
from opentelemetry.sdk.trace.sampling import ALWAYS_OFF, ALWAYS_ON
from opentelemetry.trace import Link, NonRecordingSpan, Span, SpanContext, SpanKind, Status, TraceFlags
from opentelemetry.util._decorator import _agnosticcontextmanager
from opentelemetry.util.types import Attributes
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, generate_latest

from ira.core.redact import Redactor
from ira.runtime.settings import Settings

METRICS_CONTENT_TYPE = CONTENT_TYPE_LATEST


def setup_tracing(settings: Settings, *, service_name: str = "ira", install: bool = True,
                  exporter: SpanExporter | None = None) -> TracerProvider:
    """Build this process's tracer provider.

    ``install`` makes it the global provider that ``trace.get_tracer`` hands out (the bus's
    spans use it), which only the first call in a process can do; tests pass ``install=False``
    and may pass an ``exporter`` of their own (exported span by span, redacted like OTLP's).
    Without an endpoint or an exporter, spans are not recorded but still get ids (module docstring); a span
    processor added to the returned provider later would see none.
    """
    resource = Resource.create(
        {SERVICE_NAME: service_name, "deployment.environment": settings.environment, "ira.tenant": settings.tenant}
    )
    exporting = bool(settings.otel_endpoint) or exporter is not None
    provider = (TracerProvider(resource=resource, sampler=ALWAYS_ON) if exporting
                else UnrecordedTracerProvider(resource=resource, sampler=ALWAYS_OFF))
    if settings.otel_endpoint:
        otlp = OTLPSpanExporter(endpoint=f"{settings.otel_endpoint.rstrip('/')}/v1/traces")
        provider.add_span_processor(BatchSpanProcessor(RedactingSpanExporter(otlp, settings.redactor())))
    if exporter is not None:
        provider.add_span_processor(SimpleSpanProcessor(RedactingSpanExporter(exporter, settings.redactor())))
    if install:
        trace.set_tracer_provider(provider)
    return provider


class UnrecordedTracerProvider(TracerProvider):
    """The provider of a process that exports nothing (module doc): every tracer it hands out
    makes the non-recording spans the SDK's tracer makes under ``ALWAYS_OFF``, without its path."""

    def get_tracer(self, instrumenting_module_name: str, instrumenting_library_version: str | None = None,
                   schema_url: str | None = None, attributes: Attributes = None) -> trace.Tracer:
        if self._disabled:  # OTEL_SDK_DISABLED: the SDK's no-op tracer, no ids at all
            return super().get_tracer(instrumenting_module_name, instrumenting_library_version, schema_url,
                                      attributes)
        return self._unrecorded

    @cached_property
    def _unrecorded(self) -> UnrecordedTracer:
        """One for every name: it keeps nothing per instrumentation scope."""
        return UnrecordedTracer(self.id_generator)


_DEFAULT_FLAGS = TraceFlags(TraceFlags.DEFAULT)
_RANDOM_FLAGS = TraceFlags(TraceFlags.DEFAULT | TraceFlags.RANDOM_TRACE_ID)


class UnrecordedTracer(trace.Tracer):
    """Spans as the SDK's ``Tracer`` makes them when its sampler drops them (``ALWAYS_OFF``): a
    ``NonRecordingSpan`` in the parent's trace (its trace state, its random-trace-id flag, not
    sampled) or, without a valid parent, in a new trace from the provider's id generator, with a
    new span id. What the SDK does besides (asking the sampler, building its result, its
    internal metrics) changes nothing for a span that is never recorded."""

    def __init__(self, ids: IdGenerator) -> None:
        self._ids = ids
        self._new_trace_flags = _RANDOM_FLAGS if ids.is_trace_id_random() else _DEFAULT_FLAGS

    def start_span(self, name: str, context: Context | None = None, kind: SpanKind = SpanKind.INTERNAL,
                   attributes: Attributes = None, links: Sequence[Link] | None = None, start_time: int | None = None,
                   record_exception: bool = True, set_status_on_exception: bool = True) -> Span:
        parent = trace.get_current_span(context).get_span_context()
        if parent.is_valid:
            trace_id, state = parent.trace_id, parent.trace_state
            flags = _RANDOM_FLAGS if parent.trace_flags.random_trace_id else _DEFAULT_FLAGS
        else:
            trace_id, state, flags = self._ids.generate_trace_id(), None, self._new_trace_flags
        return NonRecordingSpan(SpanContext(trace_id, self._ids.generate_span_id(), False, flags, state))

    @_agnosticcontextmanager  # the API's own decorator: what callers of a Tracer's method get
    def start_as_current_span(
            self, name: str, context: Context | None = None, kind: SpanKind = SpanKind.INTERNAL,
            attributes: Attributes = None, links: Sequence[Link] | None = None, start_time: int | None = None,
            record_exception: bool = True, set_status_on_exception: bool = True,
            end_on_exit: bool = True) -> Iterator[Span]:
        with trace.use_span(self.start_span(name, context), end_on_exit=end_on_exit) as span:
            yield span


def shutdown_tracing(provider: TracerProvider) -> None:
    """Flush buffered spans (end of process or test)."""
    provider.shutdown()


class RedactingSpanExporter(SpanExporter):
    """Hands ``inner`` copies of the spans with every string passed through the redactor."""

    def __init__(self, inner: SpanExporter, redactor: Redactor) -> None:
        self._inner = inner
        self._redactor = redactor

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        return self._inner.export([self._redacted(s) for s in spans])

    def shutdown(self) -> None:
        self._inner.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return self._inner.force_flush(timeout_millis)

    def _redacted(self, span: ReadableSpan) -> ReadableSpan:
        r = self._redactor
        events = [Event(r.text(e.name), self._attributes(e.attributes), timestamp=e.timestamp) for e in span.events]
        status = Status(span.status.status_code, r.text(span.status.description or "") or None)
        return ReadableSpan(
            name=r.text(span.name), context=span.context, parent=span.parent, resource=span.resource,
            attributes=self._attributes(span.attributes), events=events, links=span.links, kind=span.kind,
            status=status, start_time=span.start_time, end_time=span.end_time,
            instrumentation_scope=span.instrumentation_scope)

    def _attributes(self, attributes: Mapping[str, Any] | None) -> dict[str, Any]:
        return {k: self._value(v) for k, v in (attributes or {}).items()}

    def _value(self, value: Any) -> Any:
        if isinstance(value, str):
            return self._redactor.text(value)
        if isinstance(value, list | tuple):
            return tuple(self._redactor.text(v) if isinstance(v, str) else v for v in value)
        return value


class Metrics:
    """The platform's Prometheus metrics on a registry of their own.

    The shared machinery updates these; a role that needs more creates them on
    ``self.registry`` (``Counter("ira_x_total", "...", registry=metrics.registry)``).
    """

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self.outbox_oldest_unsent_age = Gauge(
            "ira_outbox_oldest_unsent_age_seconds", "Age of the oldest outbox row not yet published", registry=r
        )
        self.consumer_lag = Gauge(
            "ira_consumer_lag_messages", "Messages behind the partition's end",
            ["consumer", "topic", "partition"], registry=r,
        )
        self.dlq = Counter("ira_dlq_messages", "Messages sent to the DLQ", ["consumer", "reason"], registry=r)
        self.dead_letters = Gauge(
            "ira_dead_letters", "Dead letters kept in the store per consumer: the DLQ's size (the broker's DLQ "
            "topic may be forgotten, the store's copy is not)", ["consumer"], registry=r)
        self.parked = Gauge(
            "ira_parked_messages", "Records parked in the store per consumer: a transient failure outlasted "
            "consumer.max_hold, the partition moved on, the record is tried again from the store", ["consumer"],
            registry=r)
        self.parked_oldest_age = Gauge(
            "ira_parked_oldest_age_seconds", "Age of the oldest parked record per consumer (0 when none)",
            ["consumer"], registry=r)
        self.claims = Counter("ira_step_claims", "Step claims by outcome (won/lost)", ["result"], registry=r)
        self.conflicts = Counter(
            "ira_conflicts", "Compare-and-set conflicts by kind (state, epoch, ...)", ["kind"], registry=r
        )
        self.messages_handled = Counter(
            "ira_messages_handled", "Messages whose handler committed", ["consumer"], registry=r
        )
        self.messages_duplicate = Counter(
            "ira_messages_duplicate", "Messages dropped by the inbox as already applied", ["consumer"], registry=r
        )
        self.relay_published = Counter("ira_relay_published", "Outbox rows published by the relay", registry=r)
        self.outbox_unsent = Gauge(
            "ira_outbox_unsent_messages", "Outbox rows waiting for the relay, per topic (ira.alerts.v1: the "
            "webhook's accepted alerts not yet on the broker)", ["topic"], registry=r)
        self.outbox_unsent_age = Gauge(
            "ira_outbox_unsent_oldest_age_seconds", "Age of the oldest outbox row waiting for the relay, per topic",
            ["topic"], registry=r)
        self.outbox_resent = Counter(
            "ira_outbox_resent", "Sent messages sent again because their consumer had not applied them, per topic",
            ["topic"], registry=r)

        self.waiting = Gauge(
            "ira_waiting", "Work waiting in the store: approvals for a person (approvals), Operations whose "
            "outcome is unknown (operations_unknown), deliveries not answered yet (deliveries)", ["queue"], registry=r)
        self.waiting_oldest_age = Gauge(
            "ira_waiting_oldest_age_seconds", "Age of the oldest waiting item per queue (0 when empty)", ["queue"],
            registry=r)

        self.whole: Callable[[], Awaitable[bytes]] | None = None
        """The exposition of the whole ``ira dev`` this process is part of, where it has child
        processes (:mod:`ira.runtime.children`, :mod:`ira.runtime.devtree`)."""

    def render(self) -> bytes:
        """This process's registry in Prometheus text format (``GET /metrics?scope=process``)."""
        return generate_latest(self.registry)

    async def exposition(self) -> bytes:
        """``GET /metrics``: the whole ``ira dev``'s where there is one, else this process's."""
        return await self.whole() if self.whole is not None else self.render()
