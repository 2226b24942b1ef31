"""Trace context through Kafka headers (W3C ``traceparent``), with OpenTelemetry's propagator.

A trace that starts at the webhook continues in triage, the coordinator and the agents only
if every hop carries it: producers inject the current context into the record headers and
consumers run their handler inside a span whose parent is extracted from them. The global
propagator is used (W3C trace context + baggage unless telemetry configured another), so
this module sets nothing up; ``runtime/telemetry.py`` owns the tracer provider.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, MutableSequence, Sequence
from contextlib import contextmanager

from opentelemetry import context, propagate, trace
from opentelemetry.context import Context
from opentelemetry.propagators.textmap import Getter, Setter
from opentelemetry.trace import Span, SpanContext, SpanKind, Tracer
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


@contextmanager
def consume_span(
    tracer: Tracer,
    name: str,
    *,
    parent: Context,
    attributes: Mapping[str, AttributeValue] | None = None,
) -> Iterator[Span]:
    """Run the handler of one record as a CONSUMER span, child of the producer's span."""
    with tracer.start_as_current_span(name, context=parent, kind=SpanKind.CONSUMER,
                                      attributes=dict(attributes or {})) as span:
        yield span
