"""``POST /v1/sources/{kind}/{source_id}``: the webhook every sender posts to.

The route only moves bytes and statuses: it reads the body (refusing more than 1 MiB before
reading it when Content-Length says so, and while reading otherwise), hands it to
:class:`~ira.sources.ingest.Ingest`, and turns the outcome into the one error shape of
``ira.runtime.http``. Every refusal is counted by reason; a 202 records POST -> ack latency.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping
from datetime import timedelta

from fastapi import APIRouter, Request, Response
from fastapi.responses import JSONResponse
from starlette.requests import ClientDisconnect

from ira.core.errors import AuthenticationError, BrokerUnavailableError, NotFoundError, PlatformError
from ira.runtime.http import error_entry
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
    EdgeUnavailableError: 503,
}
"""Everything the use-case raises on purpose; anything else is a bug (the app's 500)."""


async def read_body(request: Request, limit: int) -> bytes:
    """The raw body (signatures are over these exact bytes); PayloadTooLargeError past ``limit``."""
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        raise PayloadTooLargeError(f"body of {declared} bytes is over the {limit} byte limit")
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise PayloadTooLargeError(f"body is over the {limit} byte limit")
        chunks.append(chunk)
    return b"".join(chunks)


def credentials(request: Request) -> Credentials:
    headers = request.headers
    return Credentials(authorization=headers.get("authorization"), timestamp=headers.get(TIMESTAMP_HEADER),
                       signature=headers.get(SIGNATURE_HEADER))


def rejection(exc: PlatformError, status: int) -> JSONResponse:
    """The error shape; 401 names the scheme, 429/503 say when to come back."""
    if isinstance(exc, InvalidPayloadError):
        entries = [error_entry(p.code, p.message, p.field) for p in exc.problems]
    else:
        entries = [error_entry(exc.code, exc.message)]
    headers = {}
    if status == 401:
        headers["WWW-Authenticate"] = "Bearer"
    if status in (429, 503):
        retry_after: timedelta = getattr(exc, "retry_after", None) or timedelta(seconds=1)
        headers["Retry-After"] = str(max(1, math.ceil(retry_after.total_seconds())))
    return JSONResponse({"errors": entries}, status_code=status, headers=headers)


def ingest_router(ingest: Ingest, metrics: SourceMetrics, *, max_body_bytes: int = MAX_BODY_BYTES) -> APIRouter:
    """The sources' router, around a ready use-case and its metrics.

    A plain Starlette route, not a FastAPI path operation: the body must stay raw bytes
    (signatures cover them exactly), the two path parameters are plain strings, and FastAPI's
    parameter machinery would cost ~60 µs per request, a tenth of the whole budget. The
    price is that the route is not listed in ``/docs``; DESIGN.md §10 and the README are
    its documentation.
    """

    async def receive(request: Request) -> Response:
        """Accept alerts (alertmanager, grafana, generic) or change events from a configured source."""
        started = time.perf_counter()
        kind, source_id = request.path_params["kind"], request.path_params["source_id"]
        try:
            ingest.source(kind, source_id)  # 404 before reading a body nobody will use
            body = await read_body(request, max_body_bytes)
            result = await ingest.handle(IngestRequest(kind=kind, source_id=source_id, body=body,
                                                       credentials=credentials(request)))
        except tuple(STATUSES) as exc:
            metrics.rejected(source_id if ingest.is_known(source_id) else UNKNOWN_SOURCE, exc.code)
            return rejection(exc, next(s for c, s in STATUSES.items() if isinstance(exc, c)))
        except ClientDisconnect:  # the sender hung up mid-body: nobody to answer, nothing to log
            metrics.rejected(source_id if ingest.is_known(source_id) else UNKNOWN_SOURCE, "client_disconnected")
            return Response(status_code=400)
        metrics.accepted(source_id, events=result.accepted, duplicates=result.duplicates,
                         seconds=time.perf_counter() - started)
        return Response(result.to_json(), status_code=202, media_type="application/json")

    router = APIRouter(tags=["sources"])
    router.add_route(PATH, receive, methods=["POST"], name="sources.receive")
    return router
