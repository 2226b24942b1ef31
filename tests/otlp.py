"""An OTLP/HTTP trace receiver on 127.0.0.1 for tests: what ``ira dev`` exports when
``OTEL_EXPORTER_OTLP_ENDPOINT`` points here, decoded into plain records.

It speaks the real protocol (protobuf ``ExportTraceServiceRequest`` on ``POST /v1/traces``),
so the processes under test use their real exporter; nothing of theirs is patched.
"""

from __future__ import annotations

import gzip
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue


@dataclass(frozen=True)
class SpanRecord:
    name: str
    trace_id: str
    span_id: str
    parent_span_id: str
    links: tuple[tuple[str, str], ...]
    """(trace_id, span_id) of each link."""
    attributes: dict[str, Any]
    status_code: int
    service: str


@dataclass
class Received:
    spans: list[SpanRecord] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def snapshot(self) -> list[SpanRecord]:
        with self.lock:
            return list(self.spans)

    def trace(self, trace_id: str) -> list[SpanRecord]:
        return [s for s in self.snapshot() if s.trace_id == trace_id]


def _value(v: AnyValue) -> Any:
    kind = v.WhichOneof("value")
    if kind == "array_value":
        return [_value(x) for x in v.array_value.values]
    return getattr(v, kind) if kind else None


def _decode(body: bytes) -> list[SpanRecord]:
    request = ExportTraceServiceRequest()
    request.ParseFromString(body)
    found = []
    for resource_spans in request.resource_spans:
        resource = {a.key: _value(a.value) for a in resource_spans.resource.attributes}
        for scope in resource_spans.scope_spans:
            for s in scope.spans:
                found.append(SpanRecord(
                    name=s.name, trace_id=s.trace_id.hex(), span_id=s.span_id.hex(),
                    parent_span_id=s.parent_span_id.hex(),
                    links=tuple((link.trace_id.hex(), link.span_id.hex()) for link in s.links),
                    attributes={a.key: _value(a.value) for a in s.attributes}, status_code=s.status.code,
                    service=str(resource.get("service.name", ""))))
    return found


@contextmanager
def otlp_receiver() -> Iterator[tuple[str, Received]]:
    """Yield (endpoint, received); the endpoint is what ``OTEL_EXPORTER_OTLP_ENDPOINT`` takes."""
    received = Received()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 (the stdlib's name)
            body = self.rfile.read(int(self.headers.get("content-length", "0")))
            if self.headers.get("content-encoding") == "gzip":
                body = gzip.decompress(body)
            if self.path == "/v1/traces":
                spans = _decode(body)
                with received.lock:
                    received.spans.extend(spans)
            self.send_response(200)
            self.send_header("content-type", "application/x-protobuf")
            self.send_header("content-length", "0")
            self.end_headers()

        def log_message(self, *_: object) -> None:
            return

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", received
    finally:
        server.shutdown()
        server.server_close()
