"""Run roles and the HTTP server in one process, and drain them cleanly on a signal.

Order of a stop (SIGINT/SIGTERM), each step bounded:

1. stop accepting, before anything else: the signal handler itself closes the HTTP gate, so
   every new request is answered 503 + Retry-After and ``/readyz`` says ``stopping``;
2. finish the requests already inside the gate (their answers were promised);
3. drain: the role loops keep running until every duty (consumers, the relay) has been
   idle for a while, or until ``runtime.drain_timeout`` passed;
4. tell every role loop to stop (they finish the record in hand, commit, release claims),
   wait for them, cancel stragglers; the caller's exit stack then closes clients and stops
   the embedded Redis and broker, in reverse order of their start.

A second signal skips what is left: loops are cancelled at once and the process exits 1.
A role loop that crashes stops the whole process (fail fast, exit 1): a half-running
process that looks healthy is worse than a restart.

``/readyz`` answers 200 only once every duty is ready (consumers assigned to their
partitions), and the ``ready`` line is printed at that moment, not when the port opens.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import signal
import socket
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import uvicorn

from ira.runtime.deadline import header_deadline
from ira.runtime.duty import DutyRoster
from ira.runtime.gate import Gate
from ira.runtime.http import create_app
from ira.runtime.platform import Platform
from ira.runtime.readiness import ReadinessCheck, duties_check, platform_checks, serving_check
from ira.runtime.relay import RELAY_ROLE
from ira.runtime.role import Role
from ira.runtime.wiring import ringing

log = logging.getLogger(__name__)

START_TIMEOUT = timedelta(seconds=120)
"""Longest the supervisor waits for every duty to be ready before it stops waiting (``/readyz``
then keeps naming the duty that is not)."""
STOP_TIMEOUT = timedelta(seconds=10)
"""Longest the role loops get to finish the record in hand once told to stop."""


@dataclass
class Supervision:
    """What the supervisor shares with the HTTP app and the signal handlers of one process."""

    gate: Gate = field(default_factory=Gate)
    roster: DutyRoster = field(default_factory=DutyRoster)
    requested: asyncio.Event = field(default_factory=asyncio.Event)
    """A stop was asked for: drain, then stop."""
    at_once: asyncio.Event = field(default_factory=asyncio.Event)
    """A second stop was asked for: stop without draining."""

    def request_stop(self) -> None:
        """First call: close the gate and start the drain. Second call: stop at once."""
        if self.requested.is_set():
            self.at_once.set()
            log.warning("second stop signal: stopping at once, without draining")
            return
        self.gate.close()
        self.requested.set()


def install_stop_signals(supervision: Supervision) -> None:
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, supervision.request_stop)


def build_http(
    platform: Platform, route_roles: Sequence[Role], supervision: Supervision, tracer_provider: object | None = None,
    *, listeners: Sequence[socket.socket] = (), checks: Mapping[str, ReadinessCheck] | None = None,
) -> uvicorn.Server:
    """The HTTP server: ops endpoints plus the routes of ``route_roles``, behind the gate.

    ``listeners``: sockets bound beforehand (a port shared with other processes, a private
    one: :mod:`ira.runtime.devtree`) instead of ``http.host:http.port``; ``checks``: more
    readiness checks. uvicorn's own proxy-header rewriting is off: which proxy to believe is
    ira's setting (``http.trusted_proxies``), not uvicorn's default trust of 127.0.0.1."""
    routers = [router for role in route_roles for router in role.routers(platform)]
    checks = {**platform_checks(platform), "serving": serving_check(supervision.gate.is_open),
              "roles": duties_check(supervision.roster), **(checks or {})}
    http = platform.settings.http
    app = create_app(metrics=platform.metrics, routers=routers, readiness_checks=checks,
                     tracer_provider=tracer_provider, body_timeout=http.body_timeout)  # type: ignore[arg-type]
    config = uvicorn.Config(supervision.gate.wrap(app), host=http.host, port=http.port, log_config=None,
                            access_log=False, lifespan="off", timeout_graceful_shutdown=5,
                            http=header_deadline(http.header_timeout), proxy_headers=False)
    return _Server(config, list(listeners))


class _Server(uvicorn.Server):
    """uvicorn without signal handling of its own: SIGINT/SIGTERM belong to the supervisor, which
    stops accepting HTTP and drains the role loops in its order (module docstring)."""

    def __init__(self, config: uvicorn.Config, listeners: list[socket.socket]) -> None:
        super().__init__(config)
        self._listeners = listeners

    async def serve(self, sockets: list[socket.socket] | None = None) -> None:
        await super().serve(sockets=sockets or self._listeners or None)

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


async def supervise(
    platform: Platform, loops: Sequence[Role], *, server: uvicorn.Server | None, supervision: Supervision,
    on_ready: Callable[[], None] = lambda: None,
) -> int:
    """Run until a stop is requested (exit code 0) or a role crashes (exit code 1)."""
    stop = asyncio.Event()  # tells the role loops to finish; set only after the drain
    with ringing(platform, relays_here=any(role.name == RELAY_ROLE for role in loops)):
        return await _supervise(platform, loops, stop, server=server, supervision=supervision, on_ready=on_ready)


async def _supervise(
    platform: Platform, loops: Sequence[Role], stop: asyncio.Event, *, server: uvicorn.Server | None,
    supervision: Supervision, on_ready: Callable[[], None],
) -> int:
    with supervision.roster.active():
        tasks: dict[asyncio.Task[object], str] = {
            asyncio.create_task(role.run(platform, stop), name=role.name): role.name for role in loops}
    if server is not None:
        tasks[asyncio.create_task(server.serve(), name="http")] = "http"
    requested = asyncio.create_task(supervision.requested.wait())
    await _start(supervision, server, tasks, requested, on_ready)
    done, _ = await asyncio.wait([*tasks, requested], return_when=asyncio.FIRST_COMPLETED)
    crashed = [t for t in done if t is not requested and (t.cancelled() or t.exception() is not None)]
    for task in crashed:
        log.error("%s stopped unexpectedly", tasks[task], exc_info=None if task.cancelled() else task.exception())
    supervision.gate.close()
    if not crashed:
        await _drain_accepted(supervision, platform.settings.runtime.drain_timeout)
    stop.set()
    if server is not None:
        server.should_exit = True
        server.force_exit = supervision.at_once.is_set()
    await _stop_loops(list(tasks), supervision)
    requested.cancel()
    return 1 if crashed or supervision.at_once.is_set() else 0


async def _start(
    supervision: Supervision, server: uvicorn.Server | None, tasks: dict[asyncio.Task[object], str],
    requested: asyncio.Task[object], on_ready: Callable[[], None],
) -> None:
    """Wait for the port, then for every duty to be ready; only then is the process ready."""
    if server is not None:
        await _wait_started(server, tasks)
    settle_garbage_collector()
    settled = await _unless(supervision.roster.settle(within=START_TIMEOUT), [*tasks, requested])
    if settled:
        on_ready()
    elif not requested.done() and not any(t.done() for t in tasks):
        log.warning("not ready after %ss: %s", START_TIMEOUT.total_seconds(), supervision.roster.unready())


async def _drain_accepted(supervision: Supervision, within: timedelta) -> None:
    """Steps 2 and 3 of the module docstring; a second signal cuts them short."""
    gate, roster = supervision.gate, supervision.roster
    log.info("stopping: accepting nothing new; draining (up to %ss)", within.total_seconds())
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within.total_seconds()
    at_once: asyncio.Task[object] = asyncio.create_task(supervision.at_once.wait())
    try:
        if not await _unless(gate.emptied(within=within), [at_once]):
            log.warning("stopping: %d request(s) still in flight", gate.in_flight)
        left = timedelta(seconds=max(0.0, deadline - loop.time()))
        if not await _unless(roster.quiet(within=left), [at_once]):
            log.warning("stopping: drain deadline passed; still busy: %s", ", ".join(roster.busy()) or "-")
    finally:
        at_once.cancel()


async def _unless(work: Awaitable[bool], others: Sequence[asyncio.Future[Any]]) -> bool:
    """``work``'s answer, or False as soon as any of ``others`` finishes first."""
    task = asyncio.ensure_future(work)
    await asyncio.wait([task, *others], return_when=asyncio.FIRST_COMPLETED)
    if not task.done():
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        return False
    return bool(task.result())


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


async def _stop_loops(tasks: list[asyncio.Task[object]], supervision: Supervision) -> None:
    """Give the loops STOP_TIMEOUT to finish (none after a second signal), then cancel them."""
    pending = {t for t in tasks if not t.done()}
    at_once = asyncio.create_task(supervision.at_once.wait())
    deadline = asyncio.get_running_loop().time() + STOP_TIMEOUT.total_seconds()
    while pending and not at_once.done():
        timeout = deadline - asyncio.get_running_loop().time()
        if timeout <= 0:
            break
        _, pending = await asyncio.wait([*pending, at_once], timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
        pending.discard(at_once)
    at_once.cancel()
    for task in pending:
        log.warning("%s did not stop in time; cancelling", task.get_name())
        task.cancel()
    if pending:
        await asyncio.wait(pending, timeout=5)
