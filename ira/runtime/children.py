"""``ira dev``'s child processes: roles run as ``ira worker --role ROLE`` beside the main process.

Python runs one event loop on one core; ``ira dev`` with every role in one process used ~1.2
of a machine's cores however much work waited (issue #15). ``dev.processes`` moves roles into
children of their own, started the way scale-out starts them (``ira worker``) and pointed at
the main process's embedded broker, Redis and database.

A child

* dies with ``ira dev``: Linux SIGKILLs it when its parent dies (``PR_SET_PDEATHSIG``, so a
  kill -9 of ``ira dev`` leaves no orphan), and it runs in its own session, so a terminal's
  Ctrl-C reaches only ``ira dev``, which stops the children first, in order;
* is restarted when it exits on its own after it was ready (logged as an error, with a
  growing pause); one that exits before it was ever ready stops ``ira dev`` loudly (exit 1):
  that is a broken configuration or a bug, and restarting it would only hide it;
* writes its logs to ``ira dev``'s stderr (inherited), each line naming its role; its
  progress lines (stdout) are repeated on ``ira dev``'s stdout prefixed with the role;
* serves its ops endpoints on a free port of its own, named in its ``ready`` line:
  ``ira dev``'s ``/metrics`` merges the children's (a consumer's lag, DLQ and parked figures
  come from the process that runs it) and its ``/readyz`` waits for every child's ``ready``.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import logging
import os
import re
import signal
import sys
from collections.abc import Callable, Coroutine, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import TYPE_CHECKING, Any

import httpx

from ira.runtime.duty import Duty, enlist
from ira.runtime.pause import pause

if TYPE_CHECKING:
    from ira.runtime.http import Route
    from ira.runtime.platform import Platform

log = logging.getLogger(__name__)

_PR_SET_PDEATHSIG = 1
READY = re.compile(r"^ready\s+role (\S+) at (http://\S+)$")
"""The line ``ira worker`` prints once every duty of its role is ready (:func:`ready_line`)."""
RESTART_PAUSE = timedelta(seconds=1)
RESTART_PAUSE_MAX = timedelta(seconds=30)
SCRAPE_TIMEOUT = timedelta(seconds=2)


def ready_line(role: str, url: str) -> str:
    return f"ready     role {role} at {url}"


def die_with_parent() -> Callable[[], None] | None:
    """A ``preexec_fn`` asking Linux to SIGKILL the child when its parent thread exits (start
    children from the event loop's thread).

    libc is loaded here, in the parent, so the child only makes one system call between
    fork and exec. The getppid check closes the race where the parent died before prctl.
    """
    if not sys.platform.startswith("linux"):
        return None
    libc = ctypes.CDLL(None, use_errno=True)
    parent = os.getpid()

    def preexec() -> None:
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        if os.getppid() != parent:  # the parent died before prctl took effect
            os._exit(1)

    return preexec


class ChildFailed(RuntimeError):
    """A child exited before it was ever ready: ``ira dev`` stops (exit 1) instead of looping."""


def worker_command(role: str) -> list[str]:
    """``ira worker --role ROLE`` with this interpreter (and its ``PYTHONPATH``)."""
    return [sys.executable, "-m", "ira.runtime.cli", "worker", "--role", role]


@dataclass
class Child:
    """One slot: a role's n-th child process, started again whenever it dies."""

    role: str
    index: int
    env: Mapping[str, str]
    say: Callable[[str], None]
    stop_timeout: timedelta
    pid: int | None = None
    url: str | None = None
    """Its ops endpoints once it said ready (None while it starts or is down)."""
    starts: int = 0
    duty: Duty = field(default_factory=lambda: Duty("child"))
    _was_ready: bool = False

    @property
    def label(self) -> str:
        return f"{self.role}[{self.index}]"

    async def keep(self, stopping: asyncio.Event) -> None:
        """Run (and re-run) the child until ``stopping``; then stop it (SIGTERM: it drains) and return."""
        self.duty = enlist(f"process {self.label}")
        pause_for = RESTART_PAUSE
        try:
            while not stopping.is_set():
                process = await self._spawn()
                lines = asyncio.create_task(self._read(process), name=f"{self.label}-stdout")
                try:
                    exited = await _first(process.wait(), stopping.wait())
                    if not exited:
                        self.duty.idle = False  # busy until it stopped: the parent's drain waits for it
                        await self._terminate(process)
                        self.say(f"{self.label} stopped (exit {process.returncode})")
                        return
                finally:
                    self.url, self.duty.ready = None, False
                    await self._terminate(process, at_once=True)
                    await asyncio.gather(lines, return_exceptions=True)
                if not self._was_ready:
                    raise ChildFailed(f"{self.label} (pid {process.pid}) exited with {process.returncode} "
                                      "before it was ready; see its log lines above")
                log.error("%s (pid %d) exited with %s; restarting it in %ss", self.label, process.pid,
                          process.returncode, pause_for.total_seconds())
                await pause(stopping, pause_for.total_seconds())
                pause_for = min(pause_for * 2, RESTART_PAUSE_MAX)
        finally:
            self.duty.finished = True

    async def _spawn(self) -> asyncio.subprocess.Process:
        process = await asyncio.create_subprocess_exec(
            *worker_command(self.role), stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE,
            stderr=None, env=dict(self.env), preexec_fn=die_with_parent(), start_new_session=True)
        self.pid, self.starts, self._was_ready = process.pid, self.starts + 1, False
        log.info("%s started (pid %d)", self.label, process.pid)
        return process

    async def _read(self, process: asyncio.subprocess.Process) -> None:
        """Repeat the child's progress lines, prefixed with its role; its ``ready`` line makes it ready."""
        assert process.stdout is not None
        async for raw in process.stdout:
            line = raw.decode(errors="replace").rstrip()
            if (ready := READY.match(line)) is not None:
                self.url, self._was_ready = ready.group(2), True
                self.duty.ready, self.duty.idle = True, True
            self.say(f"{self.label:<9} {line}")

    async def _terminate(self, process: asyncio.subprocess.Process, *, at_once: bool = False) -> None:
        """SIGTERM and up to ``stop_timeout`` for its drain (SIGKILL ``at_once``), then SIGKILL; reaped."""
        if process.returncode is not None:
            return
        if not at_once:
            with contextlib.suppress(ProcessLookupError):
                process.terminate()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(process.wait()), self.stop_timeout.total_seconds())
            if process.returncode is not None:
                return
            log.warning("%s did not stop within %ss; killing it", self.label, self.stop_timeout.total_seconds())
        with contextlib.suppress(ProcessLookupError):
            process.kill()
        await asyncio.shield(process.wait())


async def _first(exited: Coroutine[Any, Any, object], stopping: Coroutine[Any, Any, object]) -> bool:
    """True if the process exited first, False if the stop came first."""
    done_exit, done_stop = asyncio.ensure_future(exited), asyncio.ensure_future(stopping)
    try:
        done, _ = await asyncio.wait({done_exit, done_stop}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in (done_exit, done_stop):
            if not task.done():
                task.cancel()
    return done_exit in done


class ChildRoles:
    """The children of one ``ira dev``, supervised as one of its loops (a Role)."""

    name = "processes"

    def __init__(
        self, counts: Mapping[str, int], *, env: Callable[[str], Mapping[str, str]], say: Callable[[str], None],
        stopping: asyncio.Event, stop_timeout: timedelta,
    ) -> None:
        """``env``: a role's children's environment. ``stopping``: the main process's stop
        request; children are stopped as soon as it is set, before the main process drains its
        own loops (its relay still publishes meanwhile)."""
        self.children = [Child(role, i + 1, env(role), say, stop_timeout)
                         for role, count in counts.items() for i in range(count)]
        self._stopping = stopping
        self._client = httpx.AsyncClient(timeout=SCRAPE_TIMEOUT.total_seconds())

    def routers(self, platform: Platform) -> Sequence[Route]:
        return []

    async def run(self, platform: Platform, stop: asyncio.Event) -> None:
        either = asyncio.Event()

        async def relay(event: asyncio.Event) -> None:
            await event.wait()
            either.set()

        watchers = [asyncio.create_task(relay(e)) for e in (self._stopping, stop)]
        try:
            async with asyncio.TaskGroup() as tasks:
                for child in self.children:
                    tasks.create_task(child.keep(either), name=f"process {child.label}")
        finally:
            for watcher in watchers:
                watcher.cancel()
            await self._client.aclose()

    async def metrics(self) -> list[str]:
        """The ``/metrics`` text of every child that is up, its own only (one that does not answer is left out)."""
        urls = [c.url for c in self.children if c.url]
        answers = await asyncio.gather(*(self._client.get(f"{url}/metrics", params={"scope": "process"})
                                         for url in urls), return_exceptions=True)
        return [a.text for a in answers if isinstance(a, httpx.Response) and a.status_code == 200]
