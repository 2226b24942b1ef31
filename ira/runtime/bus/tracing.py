"""Trace context through Kafka headers (W3C ``traceparent``), with OpenTelemetry's propagator.

A trace that starts at the webhook continues in triage, the coordinator and the agents only
if every hop carries it: producers inject the current context into the record headers and
consumers run their handler inside a span whose parent is extracted from them. The global
propagator is used (W3C trace context + baggage unless telemetry configured another), so
this module sets nothing up; ``runtime/telemetry.py`` owns the tracer provider.
"""

from __future__ import annotations

from collections.abc import Mapping, MutableSequence, Sequence
from types import TracebackType

from opentelemetry import context, propagate, trace
from opentelemetry.context import Context
from opentelemetry.propagators.textmap import Getter, Setter, TextMapPropagator
from opentelemetry.trace import Span, SpanContext, SpanKind, Status, StatusCode, Tracer
from opentelemetry.util.types import AttributeValue

TRACEPARENT = "traceparent"
TRACER_NAME = "ira.runtime.bus"

KafkaHeaders = Sequence[tuple[str, bytes]]


class _HeaderGetter(Getter[KafkaHeaders]):
    """Reads a propagation field from aiokafka's ``[(key, bytes)]`` headers."""

    def get(self, carrier: KafkaHeaders, key: str) -> list[str] | None:
        values = [v.decode("utf-8", "replace") for k, v in carrier if k == key and v is not None]
        return values or None

    def keys(self, carrier: KafkaHeaders) -> list[str]:
        return [k for k, _ in carrier]


class _HeaderSetter(Setter[MutableSequence[tuple[str, bytes]]]):
    """Writes a propagation field, replacing an older value of the same key."""

    def set(self, carrier: MutableSequence[tuple[str, bytes]], key: str, value: str) -> None:
        carrier[:] = [(k, v) for k, v in carrier if k != key]
        carrier.append((key, value.encode()))


_GETTER = _HeaderGetter()
_SETTER = _HeaderSetter()


def inject(headers: MutableSequence[tuple[str, bytes]], context: Context | None = None) -> None:
    """Add the current (or given) trace context to Kafka headers; no-op without a span."""
    propagate.inject(headers, context=context, setter=_SETTER)


def extract(headers: KafkaHeaders | None, *, fallback_traceparent: str | None = None) -> Context:
    """The trace context a record carries; the envelope's own ``traceparent`` if no header."""
    carrier = list(headers or ())
    if fallback_traceparent and not any(k == TRACEPARENT for k, _ in carrier):
        carrier.append((TRACEPARENT, fallback_traceparent.encode()))
    return propagate.extract(carrier, getter=_GETTER)


def current_context() -> Context:
    """The active context: the parent of a span started now."""
    return context.get_current()


def traceparent(span_context: SpanContext) -> str | None:
    """``span_context`` as a W3C ``traceparent`` (None if it is not a valid span's): the
    propagator's format, without a propagator's cost per record."""
    if not span_context.is_valid:
        return None
    return f"00-{span_context.trace_id:032x}-{span_context.span_id:016x}-{int(span_context.trace_flags):02x}"


def bus_tracer() -> Tracer:
    """The bus's tracer; follows whatever provider telemetry installs later."""
    return trace.get_tracer(TRACER_NAME)


class ConsumedContexts:
    """The parent context of consumed records, extracted once per distinct trace header value.

    Records of one request carry the same ``traceparent`` (a webhook's alerts, a triage batch's
    decisions): extracting it with the propagator per record (a carrier list, a regex, a new
    Context each time) gave the same answer again and again. A Context is immutable, so one
    extracted per distinct value of the propagator's fields serves every record carrying it.

    Bounded (``size`` values, the oldest dropped first): a consumer meets an unbounded number of
    traces over its life, and the records sharing one arrive together. The propagator is the
    global one when asked; a different one installed since empties the cache.
    """

    def __init__(self, size: int = 256) -> None:
        self._size = size
        self._propagator: TextMapPropagator | None = None
        self._fields: tuple[str, ...] = ()
        self._known: dict[tuple[str | None, ...], Context] = {}

    def __len__(self) -> int:
        return len(self._known)

    def parent(self, headers: Mapping[str, str], *, fallback_traceparent: str | None = None) -> Context:
        """What :func:`extract` returns for these (decoded) headers, from the cache when it can."""
        propagator = propagate.get_global_textmap()
        if propagator is not self._propagator:
            self._propagator, self._fields, self._known = propagator, tuple(sorted(propagator.fields)), {}
        if fallback_traceparent and TRACEPARENT not in headers:
            headers = {**headers, TRACEPARENT: fallback_traceparent}
        key = tuple(headers.get(name) for name in self._fields)
        found = self._known.get(key)
        if found is None:
            found = propagator.extract(headers)
            if len(self._known) >= self._size:
                del self._known[next(iter(self._known))]
            self._known[key] = found
        return found


class consume_span:  # noqa: N801 - used as a function: ``with consume_span(...) as span``
    """Run the handler of one record as a CONSUMER span, child of the producer's span: the span
    current while the handler runs, ended (with the exception, if any, recorded) after it.

    What ``tracer.start_as_current_span`` does, in one object instead of two generator-based
    context managers per record (the SDK's, and ``use_span`` inside it).
    """

    __slots__ = ("_span", "_token")

    def __init__(self, tracer: Tracer, name: str, *, parent: Context,
                 attributes: Mapping[str, AttributeValue] | None = None) -> None:
        self._span = tracer.start_span(name, context=parent, kind=SpanKind.CONSUMER, attributes=attributes)
        self._token: object = None

    def __enter__(self) -> Span:
        self._token = context.attach(trace.set_span_in_context(self._span))
        return self._span

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        span = self._span
        try:
            context.detach(self._token)  # type: ignore[arg-type]
            if isinstance(exc, Exception) and span.is_recording():
                span.record_exception(exc)
                span.set_status(Status(StatusCode.ERROR, f"{type(exc).__name__}: {exc}"))
        finally:
            span.end()
