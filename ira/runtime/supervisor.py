"""Run roles and the HTTP server in one process, and drain them cleanly on a signal.

Order of shutdown on SIGINT/SIGTERM: stop accepting HTTP, tell every role loop to stop
(they finish the record in hand, commit, release claims), wait for them within a drain
timeout, cancel stragglers; the caller's exit stack then closes clients in reverse order.
A role loop that crashes stops the whole process (fail fast, exit 1): a half-running
process that looks healthy is worse than a restart.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import signal
from collections.abc import Callable, Iterator, Sequence
from datetime import timedelta

import uvicorn

from ira.runtime.http import create_app
from ira.runtime.platform import Platform
from ira.runtime.readiness import platform_checks
from ira.runtime.role import Role

log = logging.getLogger(__name__)


def build_http(
    platform: Platform, route_roles: Sequence[Role], tracer_provider: object | None = None
) -> uvicorn.Server:
    """The HTTP server: ops endpoints plus the routes of ``route_roles``."""
    routers = [router for role in route_roles for router in role.routers(platform)]
    app = create_app(metrics=platform.metrics, routers=routers, readiness_checks=platform_checks(platform),
                     tracer_provider=tracer_provider)  # type: ignore[arg-type]
    http = platform.settings.http
    config = uvicorn.Config(app, host=http.host, port=http.port, log_config=None, access_log=False,
                            lifespan="off", timeout_graceful_shutdown=5)
    return _Server(config)


class _Server(uvicorn.Server):
    """uvicorn without signal handling of its own: SIGINT/SIGTERM belong to the supervisor, which
    stops accepting HTTP and drains the role loops in its order (module docstring)."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


def install_stop_signals(stop: asyncio.Event) -> None:
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)


async def supervise(
    platform: Platform, loops: Sequence[Role], *, server: uvicorn.Server | None, stop: asyncio.Event,
    drain: timedelta = timedelta(seconds=15), on_ready: Callable[[], None] = lambda: None,
) -> int:
    """Run until ``stop`` (exit code 0) or until a role crashes (exit code 1)."""
    tasks: dict[asyncio.Task[object], str] = {
        asyncio.create_task(role.run(platform, stop), name=role.name): role.name for role in loops}
    if server is not None:
        tasks[asyncio.create_task(server.serve(), name="http")] = "http"
    watcher = asyncio.create_task(stop.wait())
    if server is not None:
        await _wait_started(server, tasks)
    settle_garbage_collector()
    on_ready()
    done, _ = await asyncio.wait([*tasks, watcher], return_when=asyncio.FIRST_COMPLETED)
    crashed = [t for t in done if t is not watcher and (t.cancelled() or t.exception() is not None)]
    for task in crashed:
        log.error("%s stopped unexpectedly", tasks[task], exc_info=None if task.cancelled() else task.exception())
    stop.set()
    if server is not None:
        server.should_exit = True
    await _drain(list(tasks), drain)
    watcher.cancel()
    return 1 if crashed else 0


def settle_garbage_collector() -> None:
    """Move everything built at start-up out of the collector's view and collect less often.

    A request allocates many short-lived objects; with the default gen-0 threshold (700) the
    collector ran constantly over the long-lived start-up heap (measured: 60% of the CPU of a
    100-alert webhook request). Frozen objects are never scanned again.
    """
    gc.collect()
    gc.freeze()
    gc.set_threshold(10_000, 20, 20)


async def _wait_started(server: uvicorn.Server, tasks: dict[asyncio.Task[object], str]) -> None:
    """Bounded wait for uvicorn to bind (a taken port ends the http task instead)."""
    for _ in range(200):
        if server.started or any(t.done() for t in tasks):
            return
        await asyncio.sleep(0.05)


async def _drain(tasks: list[asyncio.Task[object]], drain: timedelta) -> None:
    _, pending = await asyncio.wait(tasks, timeout=drain.total_seconds())
    for task in pending:
        log.warning("%s did not stop within %ss; cancelling", task.get_name(), drain.total_seconds())
        task.cancel()
    if pending:
        await asyncio.wait(pending, timeout=5)
