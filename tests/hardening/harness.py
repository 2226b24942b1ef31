"""The whole HTTP surface of ``ira dev`` (dashboard, reads, commands) on a real uvicorn on
127.0.0.1, and raw-socket helpers for what an HTTP client library will not send."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import httpx

from ira.coordinator.api import build_router
from ira.coordinator.main import build_deps
from ira.dashboard.main import role
from ira.replay.main import role as replay
from ira.runtime.http import create_app
from ira.runtime.platform import Platform
from ira.sources.main import role as sources
from tests.serving import serve

ADMIN, APPROVER, VIEWER = "dev-admin-token", "dev-approver-token", "dev-viewer-token"


def bearer(token: str) -> dict[str, str]:
    return {"authorization": f"Bearer {token}"}


@asynccontextmanager
async def served(platform: Platform) -> AsyncIterator[tuple[str, httpx.AsyncClient]]:
    """Every route of the dashboard, coordinator, sources and replay roles, as ``ira dev`` serves them."""
    routers = [*role.routers(platform), build_router(platform.settings, build_deps(platform)),
               *sources.routers(platform), *replay.routers(platform)]
    app = create_app(metrics=platform.metrics, routers=routers)
    async with serve(app) as base, httpx.AsyncClient(base_url=base, timeout=10) as client:
        yield base, client


async def raw_exchange(base: str, head: bytes, *, body: bytes = b"", timeout: float = 10) -> bytes:
    """Send ``head`` (request line and headers, CRLF-terminated) and ``body``; read until the
    server closes or ``timeout``. Returns what the server sent."""
    host, port = base.removeprefix("http://").split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    try:
        writer.write(head + body)
        await writer.drain()
        return await asyncio.wait_for(reader.read(65536), timeout)
    finally:
        writer.close()


def status_of(answer: bytes) -> int:
    return int(answer.split(b" ", 2)[1])
