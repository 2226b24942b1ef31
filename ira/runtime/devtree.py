"""Several processes of one ``ira dev`` serving one HTTP port (``dev.processes.gateway``).

Gateway children (``ira worker --role gateway``) and ``ira dev`` itself listen on the same
host and port with ``SO_REUSEPORT``: the kernel spreads new connections over them, so
webhooks are parsed, deduplicated and committed on as many cores as there are processes.
Every one of them serves every route (API and dashboard read the store; rate limits and
dedupe marks live in Redis), so it does not matter which one a connection lands on, except
for what only one process knows:

* ``/metrics``: ``ira dev`` merges its children's expositions (:mod:`ira.runtime.metrics_merge`);
  a gateway child answers ``/metrics`` with that whole exposition, fetched from ``ira dev``
  over a private port of its own (:data:`PARENT_ENV`); ``/metrics?scope=process`` is one
  process's own, which is what ``ira dev`` collects.
* ``/readyz``: a gateway child is ready only when ``ira dev`` is (its own checks plus
  ``ira dev``'s ``/readyz``).

Each child also listens on a private loopback port, named in its ``ready`` line, where
``ira dev`` collects its metrics.
"""

from __future__ import annotations

import socket
from collections.abc import Awaitable, Callable
from datetime import timedelta

import httpx

PARENT_ENV = "IRA_DEV_PARENT"
"""Set by ``ira dev`` for its children: the URL of its private listener."""
PARENT_TIMEOUT = timedelta(seconds=2)
LISTEN_BACKLOG = 2048
"""uvicorn's default backlog."""


def shared_listener(host: str, port: int) -> socket.socket:
    """A listening socket on ``host:port`` that other processes may share (``SO_REUSEPORT``)."""
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.bind((host, port))
    sock.listen(LISTEN_BACKLOG)
    sock.setblocking(False)
    return sock


def private_listener(host: str) -> socket.socket:
    """A listening socket on a free port of ``host``: this process's alone."""
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
    sock.bind((host, 0))
    sock.listen(LISTEN_BACKLOG)
    sock.setblocking(False)
    return sock


def url_of(sock: socket.socket) -> str:
    host, port = sock.getsockname()[:2]
    return f"http://{host}:{port}"


class Parent:
    """A gateway child's view of its ``ira dev``: its whole ``/metrics`` and its readiness."""

    def __init__(self, url: str) -> None:
        self._url = url
        self._client = httpx.AsyncClient(timeout=PARENT_TIMEOUT.total_seconds())

    def metrics(self, own: Callable[[], bytes]) -> Callable[[], Awaitable[bytes]]:
        """``ira dev``'s merged exposition (this process's own if it does not answer)."""

        async def whole() -> bytes:
            try:
                answer = await self._client.get(f"{self._url}/metrics")
            except httpx.HTTPError:
                return own()
            return answer.content if answer.status_code == 200 else own()

        return whole

    async def ready(self) -> None:
        """A readiness check: ``ira dev`` answers ``/readyz`` 200."""
        answer = await self._client.get(f"{self._url}/readyz")
        if answer.status_code != 200:
            raise RuntimeError(f"ira dev is not ready: {answer.text[:200]}")

    async def close(self) -> None:
        await self._client.aclose()
