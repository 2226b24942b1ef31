"""One trace per run: the run remembers the trace of the work that started it, and every later
piece of work on it (a step attempt, a timer, a decision, a delivery) continues that trace.

A Kafka hop carries the context in its headers (:mod:`ira.runtime.bus.tracing`), but a run
outlives any hop: a wake-up re-sent by the scanner, a step re-claimed after a crash, an
approval decided hours later have no live parent. So the run's ``traceparent`` is stored with
it (``runs.traceparent``), stamped on every outbox message its commits write, and restored
as the parent of each step attempt. Work that merely *touches* a run from its own request (a
person's decision, a follow-up alert) keeps its own trace and is joined by a span *link*.
"""

from __future__ import annotations

import contextvars
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from datetime import datetime
from functools import lru_cache

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.trace import Link, Span, SpanKind, Status, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
from opentelemetry.util.types import AttributeValue

from ira.core.commit import OutboxMessage

TRACER_NAME = "ira.runs"
_W3C = TraceContextTextMapPropagator()


def tracer() -> trace.Tracer:
    """Follows whatever provider telemetry installs (looked up per use, not at import)."""
    return trace.get_tracer(TRACER_NAME)


def current_traceparent() -> str | None:
    """The current span as a W3C ``traceparent``, or None outside any span."""
    c = trace.get_current_span().get_span_context()
    if not c.is_valid:
        return None
    return f"00-{c.trace_id:032x}-{c.span_id:016x}-{int(c.trace_flags):02x}"


def trace_id_of(traceparent: str | None) -> str | None:
    parts = (traceparent or "").split("-")
    return parts[1] if len(parts) == 4 and len(parts[1]) == 32 else None


def context_of(traceparent: str | None) -> Context | None:
    """The context a stored ``traceparent`` names (None if there is none or it is malformed)."""
    return _context_of(traceparent) if traceparent else None


@lru_cache(maxsize=4096)
def _context_of(traceparent: str) -> Context | None:
    """Parsed once per run's traceparent (a Context is immutable): a run's claims, attempts and
    hand-overs all continue the same one, ~10 µs of parsing each."""
    ctx = _W3C.extract({"traceparent": traceparent})
    return ctx if trace.get_current_span(ctx).get_span_context().is_valid else None


def task_context(traceparent: str | None) -> contextvars.Context:
    """A fresh context for a task that continues the trace ``traceparent`` names, as a consumer
    does for a record's header: a step handed over in-process (eager dispatch) must land in its
    run's trace, not in the span of the commit that readied it, nor in a trace of its own."""
    task = contextvars.Context()
    parent = context_of(traceparent)
    if parent is not None:
        task.run(otel_context.attach, parent)
    return task


def parent_for(run_traceparent: str | None) -> str | None:
    """What a message about a run carries: the current span when it is already in the run's
    trace (a step attempt: the finer parent), else the run's own context, else the current one."""
    current = current_traceparent()
    if run_traceparent is None or trace_id_of(current) == trace_id_of(run_traceparent):
        return current or run_traceparent
    return run_traceparent


def stamp(messages: tuple[OutboxMessage, ...], traceparent: str | None) -> tuple[OutboxMessage, ...]:
    """Each message that carries no trace context gets ``traceparent`` (its envelope's field,
    which the outbox turns into the Kafka header): the relay's hop then continues the run's trace."""
    if traceparent is None or all(m.envelope.traceparent for m in messages):
        return messages
    return tuple(m if m.envelope.traceparent else m.model_copy(update={
        "envelope": m.envelope.model_copy(update={"traceparent": traceparent})}) for m in messages)


@contextmanager
def run_span(name: str, run_traceparent: str | None, *, attributes: Mapping[str, AttributeValue] | None = None,
             kind: SpanKind = SpanKind.INTERNAL, start_time: datetime | None = None,
             link_current: bool = True) -> Iterator[Span]:
    """A span in the run's trace, made current. The work that led here (a wake-up's consumer
    span, a decision's HTTP request) is linked when it belongs to another trace."""
    parent = context_of(run_traceparent)
    here = trace.get_current_span().get_span_context()
    links = [Link(here)] if link_current and parent is not None and here.is_valid \
        and format(here.trace_id, "032x") != trace_id_of(run_traceparent) else []
    start_ns = int(start_time.timestamp() * 1e9) if start_time is not None else None
    with tracer().start_as_current_span(name, context=parent, kind=kind, links=links, attributes=attributes,
                                        start_time=start_ns, record_exception=True,
                                        set_status_on_exception=True) as span:
        yield span


def fail(span: Span, code: str, message: str | None = None) -> None:
    """Mark ``span`` failed with ira's error code (a machine-readable attribute) and a message."""
    span.set_attribute("error.type", code)
    span.set_status(Status(StatusCode.ERROR, message or code))
