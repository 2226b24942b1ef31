"""The front door of a process that is stopping: refuse new requests, let the ones inside finish.

A stop must stop *accepting* before anything else: a webhook answered 202 after the signal
is a promise made by a process that is about to drop its broker and Redis. The gate sits in
front of the whole HTTP app (webhook lanes and the API alike). Once closed, every request
except the operations endpoints is answered ``503`` + ``Retry-After`` with the one error
shape (``code: stopping``), so senders retry — against another replica, or this one after
its restart. ``/readyz`` stays reachable and says ``stopping`` (its check reads
:meth:`Gate.is_open`), ``/healthz`` and ``/metrics`` keep answering.

Requests that got in before the gate closed are counted; :meth:`Gate.emptied` waits for the
last of them, so the supervisor stops the role loops only after every accepted request got
its answer.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta

from starlette.types import ASGIApp, Receive, Scope, Send

from ira.runtime.http import error_response

ALWAYS_OPEN = frozenset({"/healthz", "/readyz", "/metrics"})
RETRY_AFTER = timedelta(seconds=5)


class Gate:
    """Open until :meth:`close`; counts the HTTP requests in flight through :meth:`wrap`."""

    def __init__(self, *, retry_after: timedelta = RETRY_AFTER) -> None:
        self._open = True
        self._in_flight = 0
        self._empty = asyncio.Event()
        self._empty.set()
        self._retry_after = str(max(1, round(retry_after.total_seconds())))

    def is_open(self) -> bool:
        return self._open

    @property
    def in_flight(self) -> int:
        return self._in_flight

    def close(self) -> None:
        """From now on refuse new requests (idempotent; safe to call from a signal handler)."""
        self._open = False

    async def emptied(self, *, within: timedelta) -> bool:
        """Wait until no request is in flight; False if ``within`` passed first."""
        try:
            await asyncio.wait_for(self._empty.wait(), within.total_seconds())
        except TimeoutError:
            return False
        return True

    def wrap(self, app: ASGIApp) -> ASGIApp:
        """``app`` behind this gate."""

        async def gated(scope: Scope, receive: Receive, send: Send) -> None:
            if scope["type"] != "http" or scope["path"] in ALWAYS_OPEN:
                await app(scope, receive, send)
                return
            if not self._open:
                await error_response(503, "stopping", "this ira process is stopping; retry later",
                                     headers={"Retry-After": self._retry_after})(scope, receive, send)
                return
            self._enter()
            try:
                await app(scope, receive, send)
            finally:
                self._leave()

        return gated

    def _enter(self) -> None:
        self._in_flight += 1
        self._empty.clear()

    def _leave(self) -> None:
        self._in_flight -= 1
        if self._in_flight == 0:
            self._empty.set()
