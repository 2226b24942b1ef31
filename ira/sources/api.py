"""``POST /v1/sources/{kind}/{source_id}``: the webhook every sender posts to.

The endpoint only moves bytes and statuses: it reads the body (refusing more than 1 MiB before
reading it when Content-Length says so, and while reading otherwise), hands it to
:class:`~ira.sources.ingest.Ingest`, and turns the outcome into the one error shape of
``ira.runtime.http``. Every refusal is counted by reason; a 202 records POST -> ack latency.

It is a :class:`~ira.runtime.http.Lane`, a plain ASGI app served ahead of FastAPI: every alert
comes through here, and FastAPI's routing, middleware and route lookup for tracing cost more
CPU per request than the ingest itself (the body must stay raw bytes anyway: signatures cover
them exactly). The lane carries its OpenAPI path item (:data:`OPENAPI`), so ``/docs`` lists it.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from starlette.types import Receive, Scope, Send

from ira.core.alert import SourceKind
from ira.core.errors import (
    AuthenticationError,
    BrokerUnavailableError,
    NotFoundError,
    PlatformError,
    StoreUnavailableError,
)
from ira.runtime.http import Lane, error_entry, json_body
from ira.runtime.http_errors import error_headers, status_for
from ira.sources.auth import SIGNATURE_HEADER, TIMESTAMP_HEADER, Credentials
from ira.sources.errors import (
    EdgeUnavailableError,
    InvalidPayloadError,
    MalformedPayloadError,
    PayloadTooLargeError,
    RateLimitedError,
)
from ira.sources.ingest import Ingest, IngestRequest
from ira.sources.metrics import UNKNOWN_SOURCE, SourceMetrics

MAX_BODY_BYTES = 1024 * 1024
PATH = "/v1/sources/{kind}/{source_id}"
STATUSES: Mapping[type[PlatformError], int] = {
    NotFoundError: 404,
    AuthenticationError: 401,
    PayloadTooLargeError: 413,
    MalformedPayloadError: 400,
    InvalidPayloadError: 422,
    RateLimitedError: 429,
    BrokerUnavailableError: 503,
    StoreUnavailableError: 503,
    EdgeUnavailableError: 503,
}
"""Everything the use-case raises on purpose; anything else is a bug (the lane's 500)."""
_REFUSED = tuple(STATUSES)
_HEADERS = {b"authorization": "authorization", TIMESTAMP_HEADER.encode(): "timestamp",
            SIGNATURE_HEADER.encode(): "signature", b"content-length": "content-length"}


class ClientDisconnected(Exception):
    """The sender hung up before its body was complete."""


async def read_body(receive: Receive, declared: str | None, limit: int) -> bytes:
    """The raw body (signatures are over these exact bytes); PayloadTooLargeError past ``limit``."""
    if declared and declared.isdigit() and int(declared) > limit:
        raise PayloadTooLargeError(f"body of {declared} bytes is over the {limit} byte limit")
    chunks, size = [], 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise ClientDisconnected
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            raise PayloadTooLargeError(f"body is over the {limit} byte limit")
        chunks.append(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks)


def request_headers(scope: Scope) -> dict[str, str]:
    """The few headers ingest reads (ASGI gives names lower-cased), by their role."""
    found = {}
    for name, value in scope["headers"]:
        role = _HEADERS.get(name)
        if role is not None:
            found[role] = value.decode("latin-1")
    return found


def rejection(exc: PlatformError, status: int) -> tuple[bytes, list[tuple[bytes, bytes]]]:
    """The error shape's body and headers; 401 names the scheme, 429/503 say when to come back."""
    if isinstance(exc, InvalidPayloadError):
        entries = [error_entry(p.code, p.message, p.field) for p in exc.problems]
    else:
        entries = [error_entry(exc.code, exc.message) | _limit_of(exc)]
    headers = [(name.lower().encode(), value.encode()) for name, value in error_headers(exc, status).items()]
    return json_body({"errors": entries}), headers


async def respond(send: Send, status: int, body: bytes, headers: list[tuple[bytes, bytes]] | None = None) -> None:
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                            *(headers or ())]})
    await send({"type": "http.response.body", "body": body})


class IngestEndpoint:
    """The ASGI app of the ingest lane, around a ready use-case and its metrics."""

    def __init__(self, ingest: Ingest, metrics: SourceMetrics, *, max_body_bytes: int = MAX_BODY_BYTES) -> None:
        self._ingest, self._metrics, self._limit = ingest, metrics, max_body_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Accept alerts (alertmanager, grafana, generic) or change events from a configured source."""
        started = time.perf_counter()
        kind, source_id = scope["path_params"]["kind"], scope["path_params"]["source_id"]
        headers = request_headers(scope)
        try:
            self._ingest.source(kind, source_id)  # 404 before reading a body nobody will use
            body = await read_body(receive, headers.get("content-length"), self._limit)
            credentials = Credentials(authorization=headers.get("authorization"),
                                      timestamp=headers.get("timestamp"), signature=headers.get("signature"))
            result = await self._ingest.handle(IngestRequest(kind=kind, source_id=source_id, body=body,
                                                             credentials=credentials))
        except _REFUSED as exc:
            self._metrics.rejected(self._source_label(source_id), exc.code)
            status = _status(exc)
            await respond(send, status, *rejection(exc, status))
            return
        except ClientDisconnected:  # nobody to answer, nothing to log
            self._metrics.rejected(self._source_label(source_id), "client_disconnected")
            return
        self._metrics.accepted(source_id, events=result.accepted, duplicates=result.duplicates,
                               seconds=time.perf_counter() - started)
        await respond(send, 202, result.to_json())

    def _source_label(self, source_id: str) -> str:
        return source_id if self._ingest.is_known(source_id) else UNKNOWN_SOURCE


def _limit_of(exc: PlatformError) -> dict[str, Any]:
    """The setting an alert limit refusal is about, so a sender can size its batches by it."""
    name, value = getattr(exc, "limit_name", None), getattr(exc, "limit", None)
    return {"limit": {"name": name, "value": value}} if name is not None else {}


def _status(exc: PlatformError) -> int:
    return status_for(exc, STATUSES)


def ingest_lane(ingest: Ingest, metrics: SourceMetrics, *, max_body_bytes: int = MAX_BODY_BYTES) -> Lane:
    """The sources' lane: ``POST /v1/sources/{kind}/{source_id}``."""
    return Lane(route=PATH, app=IngestEndpoint(ingest, metrics, max_body_bytes=max_body_bytes), openapi=OPENAPI)


def _refusal(description: str) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": ERROR_SCHEMA}}}


ERROR_SCHEMA = {"type": "object", "properties": {"errors": {"type": "array", "items": {
    "type": "object", "properties": {"code": {"type": "string"}, "message": {"type": "string"},
                                     "field": {"type": "string", "nullable": True}}}}}}

OPENAPI: dict[str, Any] = {"post": {
    "tags": ["sources"], "operationId": "post_source_events", "summary": "Send alerts or change events",
    "description": "The webhook every sender posts to, with its source instance's credentials "
                   "(bearer token, or an HMAC signature for `generic`). 202 means stored: the events are "
                   "durable and will be triaged. The body is the kind's native payload (Alertmanager v4, "
                   "Grafana, generic JSON, change events), at most 1 MiB.",
    "parameters": [
        {"name": "kind", "in": "path", "required": True,
         "schema": {"type": "string", "enum": [k.value for k in SourceKind]}},
        {"name": "source_id", "in": "path", "required": True, "schema": {"type": "string"}},
        {"name": SIGNATURE_HEADER, "in": "header", "required": False, "schema": {"type": "string"},
         "description": "generic sources: sha256=<hex HMAC of timestamp.body>"},
        {"name": TIMESTAMP_HEADER, "in": "header", "required": False, "schema": {"type": "string"}}],
    "requestBody": {"required": True, "content": {"application/json": {"schema": {"type": "object"}}}},
    "responses": {
        "202": {"description": "Stored", "content": {"application/json": {"schema": {
            "type": "object", "properties": {"accepted": {"type": "integer"}, "duplicates": {"type": "integer"},
                                             "event_ids": {"type": "array", "items": {"type": "string"}}}}}}},
        "400": _refusal("Not JSON"), "401": _refusal("Bad or missing credentials"),
        "404": _refusal("Unknown source, or a kind it is not"), "413": _refusal(
            "Body over 1 MiB, or more alerts than max_alerts_per_request (too_many_alerts, with `limit`)"),
        "422": _refusal("Not the kind's schema (one entry per problem)"),
        "429": _refusal("Over the source's request rate, or its alerts_per_second (alert_rate_limited, with "
                        "`limit`); Retry-After; nothing of the request was accepted"),
        "503": _refusal("Broker or Redis unavailable (Retry-After); nothing was accepted")}}}
"""The lane's OpenAPI path item (DESIGN.md §10)."""
