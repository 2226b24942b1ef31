"""A webhook receiver on 127.0.0.1 for tests: records each POST, answers scripted statuses."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from tests.processes import free_port


@dataclass
class Received:
    headers: dict[str, str]
    body: bytes


@dataclass
class WebhookReceiver:
    statuses: list[int] = field(default_factory=list)
    """Answers for the first requests (then 200); a status of 0 means: hang (a timeout)."""
    received: list[Received] = field(default_factory=list)
    url: str = ""
    closing: asyncio.Event = field(default_factory=asyncio.Event)

    async def _handle(self, request: Request) -> JSONResponse:
        self.received.append(Received(headers=dict(request.headers), body=await request.body()))
        status = self.statuses.pop(0) if self.statuses else 200
        if status == 0:  # hang until the test ends: the caller's timeout fires first
            await self.closing.wait()
        return JSONResponse({"ok": status < 300}, status_code=status)


@asynccontextmanager
async def webhook_receiver(statuses: list[int] | None = None) -> AsyncIterator[WebhookReceiver]:
    receiver = WebhookReceiver(statuses=list(statuses or []))
    port = free_port()
    app = Starlette(routes=[Route("/hook", receiver._handle, methods=["POST"])])
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_config=None, lifespan="off"))
    server.install_signal_handlers = lambda: None  # type: ignore[method-assign]
    task = asyncio.create_task(server.serve())
    for _ in range(200):
        if server.started:
            break
        await asyncio.sleep(0.02)
    receiver.url = f"http://127.0.0.1:{port}/hook"
    try:
        yield receiver
    finally:
        receiver.closing.set()
        server.should_exit = True
        await asyncio.wait_for(task, timeout=10)
