"""Serve an ASGI app on 127.0.0.1 with a real uvicorn inside the test's event loop."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import uvicorn

from tests.eventually import eventually
from tests.processes import free_port


@asynccontextmanager
async def serve(app: Any, **options: Any) -> AsyncIterator[str]:
    """Yield the base URL once the server accepts connections; shut it down after.

    ``options`` go to ``uvicorn.Config`` (e.g. ``http=`` a protocol class)."""
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_config=None, lifespan="off",
                                           **options))
    server.install_signal_handlers = lambda: None  # type: ignore[method-assign]
    task = asyncio.create_task(server.serve())
    try:
        await eventually(lambda: server.started or task.done(), timeout=10, message="uvicorn started")
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        await asyncio.wait_for(task, timeout=10)
