"""Bounded request bodies, enforced before a byte of the body is read.

FastAPI reads a route's whole body before it solves the route's dependencies, so without
this a 50 MiB ``POST`` with no token was read into memory, then answered 401. The
:class:`BodyLimit` middleware sits in front of the routing and

* answers ``413`` at once when ``Content-Length`` is over the route's limit;
* counts the bytes of a streamed (chunked) body as they arrive and stops at the limit;
* stops waiting for a body that stalls: ``body_timeout`` between two chunks, then ``408``.

A route states its own limit with ``openapi_extra={BODY_LIMIT: n}`` (see :func:`body_limit`),
which also documents it in the OpenAPI; every other route gets ``default``. The webhook
lane is served ahead of FastAPI and keeps its own limit (``ira.sources.api``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from datetime import timedelta
from typing import Any

from fastapi import HTTPException
from starlette.routing import BaseRoute, Match
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ira.runtime.http_errors import error_response

BODY_LIMIT = "x-ira-body-limit"
"""The OpenAPI extension key that holds a route's body limit in bytes."""
DEFAULT_BODY_LIMIT = 64 * 1024
"""Every command body is a few hundred bytes; 64 KiB leaves room and bounds the worst case."""
DEFAULT_BODY_TIMEOUT = timedelta(seconds=30)


def body_limit(limit: int) -> dict[str, Any]:
    """``openapi_extra`` for a route whose body may be larger (or must be smaller) than the default."""
    return {BODY_LIMIT: limit}


class BodyLimit:
    """ASGI middleware: each route's body bounded in size and in time (module docstring)."""

    def __init__(self, app: ASGIApp, *, routes: Sequence[BaseRoute], default: int = DEFAULT_BODY_LIMIT,
                 timeout: timedelta = DEFAULT_BODY_TIMEOUT) -> None:
        self.app, self._routes, self._default, self._timeout = app, routes, default, timeout.total_seconds()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = _content_length(scope)
        if declared is None:
            await error_response(400, "invalid_content_length", "Content-Length must be a decimal number")(
                scope, receive, send)
            return
        expected = declared > 0 or _is_chunked(scope)
        limit = self._limit_for(scope) if expected else 0
        if declared > limit:
            await _too_large(limit)(scope, receive, send)
            return
        counted = _Counted(receive, limit=limit, timeout=self._timeout, expected=expected)

        async def closing_send(message: Message) -> None:
            if message["type"] == "http.response.start" and not counted.complete:
                # Answered before the body was read (401, 404...): close rather than drain it.
                message = {**message, "headers": [*message.get("headers", []), (b"connection", b"close")]}
            await send(message)

        await self.app(scope, counted, closing_send)

    def _limit_for(self, scope: Scope) -> int:
        return _route_limit(self._routes, scope, self._default)


def _route_limit(routes: Sequence[BaseRoute], scope: Scope, default: int) -> int:
    """The limit of the route ``scope`` goes to. FastAPI (0.165) keeps an included router as one
    route that matches all of its paths, so the search goes into it to find the route itself."""
    for route in routes:
        match, _ = route.matches(scope)
        if match != Match.FULL:
            continue
        inner = getattr(getattr(route, "original_router", None), "routes", None)
        if inner is not None:
            return _route_limit(inner, scope, default)
        extra = getattr(route, "openapi_extra", None) or {}
        return int(extra.get(BODY_LIMIT, default))
    return default


class _Counted:
    """The ``receive`` of one request: counts body bytes, bounds the wait for each chunk."""

    def __init__(self, receive: Receive, *, limit: int, timeout: float, expected: bool) -> None:
        self._receive, self._limit, self._timeout = receive, limit, timeout
        self._size, self.done = 0, not expected
        self.complete = self.done
        """The whole body arrived (else an answer closes the connection instead of draining it)."""

    async def __call__(self) -> Message:
        if self.done:  # the body is whole: later calls wait for a disconnect (SSE), unbounded
            return await self._receive()
        try:
            message = await asyncio.wait_for(self._receive(), self._timeout)
        except TimeoutError:
            self.done = True
            raise HTTPException(408, detail={"code": "body_timeout",
                                             "message": "the request body stalled; send it faster"}) from None
        if message["type"] == "http.disconnect":
            self.done = True
        elif message["type"] == "http.request":
            self._size += len(message.get("body", b""))
            self.done = self.complete = not message.get("more_body", False)
            if self._size > self._limit:
                self.done = True
                raise HTTPException(413, detail=_too_large_entry(self._limit))
        return message


def _content_length(scope: Scope) -> int | None:
    """The declared length, 0 when absent; None when it is not plain ASCII digits."""
    for name, value in scope["headers"]:
        if name == b"content-length":
            return int(value) if value.isdigit() and len(value) < 19 else None
    return 0


def _is_chunked(scope: Scope) -> bool:
    return any(name == b"transfer-encoding" for name, _ in scope["headers"])


def _too_large_entry(limit: int) -> dict[str, Any]:
    return {"code": "payload_too_large", "message": f"the body is over this route's limit of {limit} bytes"}


def _too_large(limit: int) -> ASGIApp:
    entry = _too_large_entry(limit)
    return error_response(413, entry["code"], entry["message"], headers={"Connection": "close"})
