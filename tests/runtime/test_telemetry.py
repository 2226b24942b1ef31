"""Telemetry: JSON log lines with context ids and masked secrets, per-app metrics, OTLP export."""

from __future__ import annotations

import io
import json
import logging
import threading
from collections.abc import Iterator
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path

import pytest
from opentelemetry import propagate, trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.sampling import ALWAYS_OFF
from opentelemetry.trace import Status, StatusCode
from prometheus_client import Counter
from pydantic import SecretStr

from ira.core.commit import OutboxMessage
from ira.core.envelope import Envelope
from ira.core.redact import MASK
from ira.runtime import runtrace
from ira.runtime.bus import tracing
from ira.runtime.logs import configure_logging, current_log_context, log_context
from ira.runtime.settings import load_settings
from ira.runtime.telemetry import Metrics, setup_tracing, shutdown_tracing
from tests.eventually import eventually


@pytest.fixture
def log_stream() -> Iterator[io.StringIO]:
    """The JSON handler writing to a buffer, with the dev secrets to mask; removed afterwards."""
    root = logging.getLogger()
    level, stream = root.level, io.StringIO()
    handler = configure_logging("DEBUG", secrets=load_settings({}).secret_values(), stream=stream)
    yield stream
    root.removeHandler(handler)
    root.setLevel(level)


def lines(stream: io.StringIO) -> list[dict[str, object]]:
    """The lines these tests logged (``ira.test``): a library's own line from another thread (an
    earlier test's aiosqlite connection closed as it is collected) may land in the buffer too."""
    parsed = [json.loads(line) for line in stream.getvalue().splitlines()]
    return [line for line in parsed if line["logger"] == "ira.test"]


def test_log_line_is_json_with_the_context_ids(log_stream: io.StringIO) -> None:
    log = logging.getLogger("ira.test")

    with log_context(tenant_id="demo", run_id="run-1"), log_context(step_id="metrics"):
        log.info("claimed %s", "step")
    log.info("outside")

    inside, outside = lines(log_stream)
    assert inside["message"] == "claimed step"
    assert (inside["level"], inside["logger"]) == ("INFO", "ira.test")
    assert (inside["tenant_id"], inside["run_id"], inside["step_id"]) == ("demo", "run-1", "metrics")
    assert str(inside["timestamp"]).endswith("+00:00")
    assert "run_id" not in outside
    assert current_log_context() == {}


def test_log_line_carries_the_current_trace(log_stream: io.StringIO) -> None:
    tracer = TracerProvider().get_tracer("test")

    with tracer.start_as_current_span("work") as span:
        logging.getLogger("ira.test").warning("inside a span")

    [line] = lines(log_stream)
    assert line["trace_id"] == format(span.get_span_context().trace_id, "032x")
    assert line["span_id"] == format(span.get_span_context().span_id, "016x")


def test_secrets_are_masked_in_messages_extras_and_tracebacks(log_stream: io.StringIO) -> None:
    log = logging.getLogger("ira.test")

    log.info("auth with %s", "dev-admin-token", extra={"header": "Bearer dev-am-token"})
    log.info("a SecretStr prints as %s", SecretStr("never-shown"))
    try:
        raise ValueError("bad signature for dev-generic-secret")
    except ValueError:
        log.exception("verification failed")

    text = log_stream.getvalue()
    for secret in ("dev-admin-token", "dev-am-token", "dev-generic-secret", "never-shown"):
        assert secret not in text
    first, _, failure = lines(log_stream)
    assert (first["message"], first["header"]) == (f"auth with {MASK}", f"Bearer {MASK}")
    assert f"ValueError: bad signature for {MASK}" in str(failure["exception"])


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.mark.parametrize(("log_format", "stream", "text"), [
    ("auto", Terminal(), True), ("auto", io.StringIO(), False), ("json", Terminal(), False),
    ("text", io.StringIO(), True)])
def test_a_terminal_gets_quiet_text_lines_and_anything_else_json(
    log_format: str, stream: io.StringIO, text: bool,
) -> None:
    root = logging.getLogger()
    level = root.level
    handler = configure_logging("INFO", secrets=["s3cret-value"], stream=stream, log_format=log_format)
    try:
        logging.getLogger("ira.test").info("started")
        logging.getLogger("ira.test").warning("disk at %d%% with s3cret-value", 91)
    finally:
        root.removeHandler(handler)
        root.setLevel(level)
    shown = stream.getvalue().splitlines()
    if text:  # warnings and worse only, one readable line each, secrets masked
        assert len(shown) == 1 and shown[0].endswith(f"WARNING ira.test: disk at 91% with {MASK}")
    else:
        assert [json.loads(line)["message"] for line in shown] == ["started", f"disk at 91% with {MASK}"]


def test_each_metrics_object_has_its_own_registry() -> None:
    first, second = Metrics(), Metrics()
    first.claims.labels(result="won").inc()
    first.dlq.labels(consumer="triage", reason="invalid_message").inc()
    Counter("ira_triage_incidents", "incidents opened", registry=second.registry).inc(2)

    first_text, second_text = first.render().decode(), second.render().decode()

    assert 'ira_step_claims_total{result="won"} 1.0' in first_text
    assert 'ira_dlq_messages_total{consumer="triage",reason="invalid_message"} 1.0' in first_text
    assert "ira_step_claims_total{" not in second_text
    assert "ira_triage_incidents_total 2.0" in second_text and "ira_triage" not in first_text


class _TraceSink(BaseHTTPRequestHandler):
    """A stand-in OTLP/HTTP collector: records which paths received a POST."""

    received: list[str] = []

    def do_POST(self) -> None:  # noqa: N802 (http.server's naming)
        self.rfile.read(int(self.headers.get("content-length", 0)))
        type(self).received.append(self.path)
        self.send_response(200)
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


async def test_spans_are_exported_over_otlp_http_when_an_endpoint_is_set(tmp_path: Path) -> None:
    server = HTTPServer(("127.0.0.1", 0), _TraceSink)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    endpoint = f"http://127.0.0.1:{server.server_address[1]}"
    provider = setup_tracing(load_settings({"OTEL_EXPORTER_OTLP_ENDPOINT": endpoint}), install=False)
    try:
        with provider.get_tracer("test").start_as_current_span("alert received"):
            pass
        provider.force_flush()
        await eventually(lambda: "/v1/traces" in _TraceSink.received, timeout=10)
    finally:
        shutdown_tracing(provider)
        server.shutdown()
        server.server_close()


def test_without_an_endpoint_nothing_is_exported() -> None:
    provider = setup_tracing(load_settings({}), install=False)
    try:
        assert provider.resource.attributes["service.name"] == "ira"
        assert provider.resource.attributes["deployment.environment"] == "prod"
        assert not provider._active_span_processor._span_processors  # no exporter attached
    finally:
        shutdown_tracing(provider)


def test_without_an_exporter_spans_are_not_recorded_but_their_ids_reach_runs_records_and_logs(
    log_stream: io.StringIO,
) -> None:
    provider = setup_tracing(load_settings({}), install=False)
    tracer = provider.get_tracer("test")
    with tracer.start_as_current_span("alert received") as root:
        recording = [root.is_recording()]  # (a recorded span stops recording once ended)
        logging.getLogger("ira.test").warning("inside")
        stored = runtrace.current_traceparent()  # what a run keeps (runs.traceparent)
    unstamped = OutboxMessage(topic="t", key="k", envelope=Envelope(
        message_id="m-1", type="test.event", tenant_id="demo", occurred_at=datetime.now(UTC)))
    with tracer.start_as_current_span("step", context=runtrace.context_of(stored)) as step:  # hours later
        recording.append(step.is_recording())
        [message] = runtrace.stamp((unstamped,), runtrace.current_traceparent())
    headers: list[tuple[str, bytes]] = []
    tracing.inject(headers, trace.set_span_in_context(step))

    ids = root.get_span_context()
    assert recording == [False, False]
    assert ids.is_valid and runtrace.trace_id_of(stored) == f"{ids.trace_id:032x}"
    assert step.get_span_context().trace_id == ids.trace_id  # the run's later work continues it
    assert runtrace.trace_id_of(message.envelope.traceparent) == f"{ids.trace_id:032x}"
    assert runtrace.trace_id_of(dict(headers)[tracing.TRACEPARENT].decode()) == f"{ids.trace_id:032x}"
    [line] = lines(log_stream)
    assert (line["trace_id"], line["span_id"]) == (f"{ids.trace_id:032x}", f"{ids.span_id:016x}")


def test_without_an_exporter_spans_carry_the_ids_flags_and_state_the_sdk_would_give_them() -> None:
    """The unrecorded tracer's spans against the SDK's own tracer under ALWAYS_OFF, parent by parent."""
    ours = setup_tracing(load_settings({}), install=False).get_tracer("test")
    sdk = TracerProvider(sampler=ALWAYS_OFF).get_tracer("test")
    parents = {
        "none": None,
        "sampled, with trace state": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        "unsampled": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00",
        "random trace id": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-03",
        "invalid": "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
    }
    for name, parent in parents.items():
        context = runtrace.context_of(parent) if parent else None
        if name == "sampled, with trace state":
            context = propagate.extract({"traceparent": parent, "tracestate": "vendor=abc,other=1"})
        spans = [ours.start_span("s", context=context), sdk.start_span("s", context=context)]
        mine, theirs = (span.get_span_context() for span in spans)
        assert not any(span.is_recording() for span in spans), name
        assert mine.is_valid and not mine.is_remote, name
        assert (mine.trace_flags, mine.trace_state) == (theirs.trace_flags, theirs.trace_state), name
        assert (mine.trace_id == theirs.trace_id) == (name not in ("none", "invalid")), name  # a new trace else
        assert mine.span_id not in (0, theirs.span_id), name
        if name == "sampled, with trace state":
            assert mine.trace_state.get("vendor") == "abc"
        if name in ("none", "random trace id"):
            assert mine.trace_flags.random_trace_id and not mine.trace_flags.sampled
        assert tracing.traceparent(mine) == f"00-{mine.trace_id:032x}-{mine.span_id:016x}-{int(theirs.trace_flags):02x}"
    with ours.start_as_current_span("current") as span:
        assert trace.get_current_span() is span
    assert trace.get_current_span() is not span


def test_with_an_exporter_a_span_is_exported_though_its_parent_came_unsampled() -> None:
    exporter = InMemorySpanExporter()
    provider = setup_tracing(load_settings({}), install=False, exporter=exporter)
    unsampled = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00"  # from a process exporting nothing
    try:
        with provider.get_tracer("test").start_as_current_span("step", context=runtrace.context_of(unsampled)):
            pass
    finally:
        shutdown_tracing(provider)
    [exported] = exporter.get_finished_spans()
    assert f"{exported.context.trace_id:032x}" == "4bf92f3577b34da6a3ce929d0e0e4736"
    assert exported.parent is not None and f"{exported.parent.span_id:016x}" == "00f067aa0ba902b7"


def test_secret_shaped_text_is_masked_in_logs_too(log_stream: io.StringIO) -> None:
    logging.getLogger("ira.test").warning("env STRIPE_API_KEY=sk_live_4eC39HqLyjWDarjtT1zdp7dc leaked")

    [line] = lines(log_stream)
    assert line["message"] == f"env STRIPE_API_KEY={MASK} leaked"


def test_span_attributes_events_and_status_are_redacted_on_export() -> None:
    exporter = InMemorySpanExporter()
    provider = setup_tracing(load_settings({}), install=False, exporter=exporter)
    try:
        with provider.get_tracer("test").start_as_current_span("chat") as span:
            span.set_attribute("ira.query", "token=dev-admin-token")
            span.set_attribute("ira.lines", ["Authorization: Bearer abcdefgh12345678", "ok"])
            span.set_attribute("gen_ai.usage.input_tokens", 900)
            span.record_exception(ValueError("bad signature for dev-generic-secret"))
            span.set_status(Status(StatusCode.ERROR, "ghp_0123456789abcdefghij0123"))
    finally:
        shutdown_tracing(provider)
    [exported] = exporter.get_finished_spans()
    shown = str(exported.to_json())
    for secret in ("dev-admin-token", "abcdefgh12345678", "dev-generic-secret", "ghp_0123456789"):
        assert secret not in shown
    assert exported.attributes["gen_ai.usage.input_tokens"] == 900
    assert exported.attributes["ira.lines"] == (f"Authorization: Bearer {MASK}", "ok")
