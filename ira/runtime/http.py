"""The HTTP app every ira process serves: health, readiness, metrics, and the roles' routes.

Every error a client can see has one machine-readable shape (DESIGN.md §6)::

    {"errors": [{"code": "...", "message": "...", "field": "body.alerts.0.labels" | null}]}

Bad input is a 4xx, never a 500: request validation -> 422 with one entry per problem, ira's
own errors -> a status by class (NotFoundError -> 404, a lost compare-and-set -> 409, a
broker that is down -> 503 + Retry-After). Anything unexpected is logged once and answered
with a bare ``internal`` 500 that leaks nothing.

``create_app`` takes ready dependencies, not a Platform, so tests build an app against a
real database and Redis without standing up the whole process.

A :class:`Lane` is an endpoint served ahead of FastAPI (:class:`LanedApp`): for a hot path,
such as the webhook every alert arrives on, whose cost would otherwise be the framework's —
routing across every route, the middleware stack, the instrumentation's route lookup were
~60 % of a webhook's CPU, measured. A lane gets the raw ASGI call; it keeps the same error
shape, the ``internal`` 500 and one SERVER span per request.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from http import HTTPStatus
from typing import Any, cast

from fastapi import APIRouter, FastAPI, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from opentelemetry import context as otel_context
from opentelemetry import propagate
from opentelemetry.instrumentation.asgi import asgi_getter
from opentelemetry.instrumentation.fastapi import FastAPIInstrumentor
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.trace import SpanKind, Status, StatusCode, Tracer, set_span_in_context
from pydantic import ValidationError
from sqlalchemy.exc import DBAPIError
from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ira.core.errors import (
    ArtifactTooLargeError,
    AuthenticationError,
    BudgetExhaustedError,
    ConcurrentUpdateError,
    ConnectorRejectedError,
    DomainError,
    DuplicateMessageError,
    IllegalTransitionError,
    InvalidMessageError,
    NotFoundError,
    PermissionDeniedError,
    PlatformError,
    TransientError,
)
from ira.runtime.apidocs import install_docs
from ira.runtime.body import DEFAULT_BODY_LIMIT, DEFAULT_BODY_TIMEOUT, BodyLimit
from ira.runtime.http_errors import error_entry, error_headers, error_response, json_body, status_for
from ira.runtime.readiness import DEFAULT_CHECK_TIMEOUT, ReadinessCheck, run_checks
from ira.runtime.store.refusal import is_refused_value, sqlstate_of
from ira.runtime.telemetry import METRICS_CONTENT_TYPE, Metrics

logger = logging.getLogger(__name__)

__all__ = ["Lane", "LanedApp", "Route", "create_app", "error_entry", "error_response", "json_body"]

ERROR_STATUSES: Mapping[type[PlatformError], int] = {
    NotFoundError: 404,
    AuthenticationError: 401,
    PermissionDeniedError: 403,
    IllegalTransitionError: 409,
    BudgetExhaustedError: 409,
    ArtifactTooLargeError: 413,
    InvalidMessageError: 422,
    DomainError: 400,
    ConcurrentUpdateError: 409,
    DuplicateMessageError: 409,
    ConnectorRejectedError: 502,
    TransientError: 503,
}
"""HTTP status per error class; the nearest class in the MRO wins. Others (ConfigError) are 500."""

UNTRACED_PATHS = "healthz,readyz,metrics"
_TRACE_HEADERS = frozenset({b"traceparent", b"tracestate", b"baggage"})


@dataclass(frozen=True)
class Lane:
    """An endpoint served ahead of the FastAPI app (see the module docstring).

    ``route`` is a path template whose ``{name}`` segments match one non-empty path segment
    each; the lane's ``app`` finds them in ``scope["path_params"]``. Another method on the
    route is answered 405 by the LanedApp. ``openapi`` is the route's OpenAPI path item, so
    ``/docs`` lists the lane like any FastAPI route (see ``ira.runtime.apidocs``).
    """

    route: str
    app: ASGIApp
    methods: frozenset[str] = frozenset({"POST"})
    openapi: Mapping[str, Any] | None = field(default=None, compare=False)
    _segments: tuple[str, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_segments", tuple(self.route.split("/")))

    def match(self, path: str) -> dict[str, str] | None:
        """The path parameters if ``path`` is this lane's route, else None."""
        parts = path.split("/")
        if len(parts) != len(self._segments):
            return None
        params = {}
        for part, segment in zip(parts, self._segments, strict=True):
            if segment.startswith("{"):
                if not part:
                    return None
                params[segment[1:-1]] = part
            elif part != segment:
                return None
        return params


Route = APIRouter | Lane
"""What a role adds to the HTTP app: FastAPI routers, and lanes for its hot paths."""


def create_app(
    *,
    metrics: Metrics,
    routers: Sequence[Route] = (),
    readiness_checks: Mapping[str, ReadinessCheck] | None = None,
    tracer_provider: TracerProvider | None = None,
    check_timeout: timedelta = DEFAULT_CHECK_TIMEOUT,
    error_statuses: Mapping[type[PlatformError], int] | None = None,
    title: str = "ira",
    body_limit: int = DEFAULT_BODY_LIMIT,
    body_timeout: timedelta = DEFAULT_BODY_TIMEOUT,
) -> ASGIApp:
    """The app: ``/healthz``, ``/readyz``, ``/metrics``, the given routers and lanes, error handlers.

    ``error_statuses`` adds or overrides statuses for a package's own error classes.
    ``body_limit`` bounds the body of every FastAPI route that states no limit of its own
    (``ira.runtime.body``), ``body_timeout`` the wait for each piece of it; lanes bound their own.
    With ``tracer_provider`` every request except health and metrics gets a server span.
    Without lanes the result is the FastAPI app itself; with lanes, a LanedApp in front of it.
    """
    app = FastAPI(title=title, docs_url=None, redoc_url=None)
    app.include_router(_operations_router(metrics, dict(readiness_checks or {}), check_timeout))
    lanes = [route for route in routers if isinstance(route, Lane)]
    install_docs(app, lanes)
    for router in routers:
        if isinstance(router, APIRouter):
            app.include_router(router)
    _install_error_handlers(app, {**ERROR_STATUSES, **(error_statuses or {})})
    app.add_middleware(BodyLimit, routes=app.routes, default=body_limit, timeout=body_timeout)
    app.add_middleware(_InternalErrorMiddleware)
    if tracer_provider is not None:
        # One server span per request; the ASGI receive/send sub-spans cost ~300 µs and say little.
        FastAPIInstrumentor.instrument_app(app, tracer_provider=tracer_provider, excluded_urls=UNTRACED_PATHS,
                                           exclude_spans=["receive", "send"])
    if not lanes:
        return app
    return LanedApp(app, lanes, tracer=tracer_provider.get_tracer(__name__) if tracer_provider else None)


class LanedApp:
    """Serves each :class:`Lane` itself and everything else through the FastAPI ``app``."""

    def __init__(self, app: ASGIApp, lanes: Sequence[Lane], *, tracer: Tracer | None = None) -> None:
        self.app, self.lanes, self._tracer = app, tuple(lanes), tracer

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            for lane in self.lanes:
                params = lane.match(scope["path"])
                if params is not None:
                    scope["path_params"] = params
                    await self._serve(lane, scope, receive, send)
                    return
        await self.app(scope, receive, send)

    async def _serve(self, lane: Lane, scope: Scope, receive: Receive, send: Send) -> None:
        method = scope["method"]
        if method not in lane.methods:
            allow = ", ".join(sorted(lane.methods))
            await error_response(405, "method_not_allowed", f"{method} is not allowed here; use {allow}",
                                 headers={"Allow": allow})(scope, receive, send)
            return
        if self._tracer is None:
            await _answer_internal_errors(lane.app, scope, receive, send)
            return
        # The caller's trace, if it sent one (skipping the propagators' work for senders that do not).
        carried = any(name in _TRACE_HEADERS for name, _ in scope["headers"])
        parent = propagate.extract(cast("dict[str, Any]", scope), getter=asgi_getter) if carried else None
        span = self._tracer.start_span(f"{method} {lane.route}", context=parent, kind=SpanKind.SERVER, attributes={
            "http.request.method": method, "http.route": lane.route, "url.path": scope["path"]})
        token, status = otel_context.attach(set_span_in_context(span)), 500  # 500 unless it answered
        try:
            status = await _answer_internal_errors(lane.app, scope, receive, send)
        finally:
            otel_context.detach(token)
            span.set_attribute("http.response.status_code", status)
            if status >= 500:
                span.set_status(Status(StatusCode.ERROR))
            span.end()


def _operations_router(metrics: Metrics, checks: dict[str, ReadinessCheck], timeout: timedelta) -> APIRouter:
    router = APIRouter(tags=["operations"])

    @router.get("/healthz")
    async def healthz() -> dict[str, str]:
        """The process is alive (says nothing about its dependencies)."""
        return {"status": "ok"}

    @router.get("/readyz")
    async def readyz() -> JSONResponse:
        """200 when every dependency answers; 503 naming each one that does not, and why."""
        failing = await run_checks(checks, timeout=timeout)
        if failing:
            return JSONResponse({"status": "not_ready", "failing": failing}, status_code=503)
        return JSONResponse({"status": "ready", "checked": sorted(checks)})

    @router.get("/metrics")
    async def prometheus_metrics(scope: str | None = None) -> Response:
        """Prometheus text exposition: of the whole ``ira dev`` with its child processes, or with
        ``?scope=process`` of the one process that answers (what ``ira dev`` collects)."""
        body = metrics.render() if scope == "process" else await metrics.exposition()
        return Response(body, media_type=METRICS_CONTENT_TYPE)

    return router


def _install_error_handlers(app: FastAPI, statuses: Mapping[type[PlatformError], int]) -> None:
    async def on_request_invalid(_: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, RequestValidationError | ValidationError)
        return _validation_response(exc.errors())

    async def on_http(_: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, HTTPException)
        return JSONResponse(
            {"errors": _http_entries(exc.status_code, exc.detail)}, status_code=exc.status_code, headers=exc.headers
        )

    async def on_platform(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, PlatformError)
        return _platform_response(request, exc, statuses)

    async def on_database_error(_: Request, exc: Exception) -> JSONResponse:
        # A value the database refuses (a NUL or an over-long string on PostgreSQL) is the
        # request's fault, not the server's; the value itself is not echoed (it may be a secret).
        if not is_refused_value(exc):
            raise exc
        return error_response(422, "unstorable_value", "a value of the request cannot be stored "
                              f"(SQLSTATE {sqlstate_of(exc) or 'unknown'}): a NUL character, or a value too long or "
                              "out of range")

    app.add_exception_handler(RequestValidationError, on_request_invalid)
    app.add_exception_handler(DBAPIError, on_database_error)
    # A route that validates a body by hand (model_validate) still answers 422, not 500.
    app.add_exception_handler(ValidationError, on_request_invalid)
    app.add_exception_handler(HTTPException, on_http)
    app.add_exception_handler(PlatformError, on_platform)


def _validation_response(errors: Sequence[Any]) -> JSONResponse:
    entries = [error_entry(e["type"], e["msg"], ".".join(str(p) for p in e["loc"]) or None) for e in errors]
    return JSONResponse({"errors": entries}, status_code=422)


def _http_entries(status: int, detail: Any) -> list[dict[str, Any]]:
    """Routes may raise HTTPException with a plain message or with ready error entries."""
    if isinstance(detail, dict) and "code" in detail:
        detail = [detail]
    if isinstance(detail, list) and all(isinstance(d, dict) and "code" in d for d in detail):
        return [error_entry(d["code"], str(d.get("message", "")), d.get("field")) for d in detail]
    code = HTTPStatus(status).phrase.lower().replace(" ", "_").replace("-", "_")
    return [error_entry(code, str(detail))]


def _platform_response(
    request: Request, exc: PlatformError, statuses: Mapping[type[PlatformError], int]
) -> JSONResponse:
    status = status_for(exc, statuses)
    if status == 500:
        logger.error("%s %s failed", request.method, request.url.path, exc_info=exc)
        return error_response(500, "internal", "internal error")
    if status == 503:
        logger.warning("%s %s unavailable: %s", request.method, request.url.path, exc.message)
    return error_response(status, exc.code, exc.message, headers=error_headers(exc, status))


class _InternalErrorMiddleware:
    """Turns an unhandled exception into the ``internal`` 500, logged exactly once.

    Pure ASGI (not BaseHTTPMiddleware) so streaming responses such as SSE pass untouched.
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        await _answer_internal_errors(self.app, scope, receive, send)


async def _answer_internal_errors(app: ASGIApp, scope: Scope, receive: Receive, send: Send) -> int:
    """Run ``app``; an exception becomes the logged ``internal`` 500. Returns the status sent."""
    status = 0

    async def tracking_send(message: Message) -> None:
        nonlocal status
        if message["type"] == "http.response.start":
            status = message["status"]
        await send(message)

    try:
        await app(scope, receive, tracking_send)
    except Exception:
        logger.exception("%s %s failed", scope.get("method"), scope.get("path"))
        if status:
            raise  # too late for a clean error body; let the server drop the connection
        await error_response(500, "internal", "internal error")(scope, receive, send)
        return 500
    return status
