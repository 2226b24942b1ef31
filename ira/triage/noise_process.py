"""Supervising the faust noise worker child: start it, restart it if it dies, stop it with triage.

The child must never outlive triage: it is stopped with SIGTERM (then SIGKILL) when the stop
event is set, it runs in its own session so a terminal's Ctrl-C reaches only ira (which then
stops it in order), and Linux kills it if its parent dies first (``PR_SET_PDEATHSIG``).
Its output goes to a log file, not to ira's JSON log stream.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sys
from datetime import timedelta
from pathlib import Path

from ira.runtime.children import die_with_parent
from ira.runtime.pause import pause
from ira.triage.noise_app import NoiseWorkerConfig

log = logging.getLogger(__name__)
MODULE = "ira.triage.noise_worker"


class NoiseWorkerProcess:
    """Keeps one noise worker child running until ``stop``; ``pid`` is the current child's."""

    def __init__(
        self, config: NoiseWorkerConfig, *, log_path: Path,
        restart_delay: timedelta = timedelta(seconds=2), stop_timeout: timedelta = timedelta(seconds=10),
    ) -> None:
        self._config, self._log_path = config, log_path
        self._restart_delay, self._stop_timeout = restart_delay, stop_timeout
        self.pid: int | None = None
        self.starts = 0

    async def run(self, stop: asyncio.Event) -> None:
        """Run (and re-run) the child until ``stop``; then stop it and return.

        Noise control is advisory, so a child that cannot start is logged and tried again
        later; it never stops triage itself.
        """
        while not stop.is_set():
            try:
                process = await self._spawn()
            except OSError as exc:
                log.error("triage noise worker could not start, trying again: %r", exc)
                await pause(stop, self._restart_delay.total_seconds())
                continue
            try:
                exited = await self._wait(process, stop)
            finally:  # cancelled or stopping: the child goes too
                await self._terminate(process)
            if exited:
                log.warning("triage noise worker exited with %s; restarting (log: %s)", process.returncode,
                            self._log_path)
                await pause(stop, self._restart_delay.total_seconds())

    async def _spawn(self) -> asyncio.subprocess.Process:
        self._log_path.parent.mkdir(parents=True, exist_ok=True)
        with self._log_path.open("ab") as output:
            process = await asyncio.create_subprocess_exec(
                sys.executable, "-m", MODULE, stdin=asyncio.subprocess.PIPE, stdout=output,
                stderr=asyncio.subprocess.STDOUT, preexec_fn=die_with_parent(), start_new_session=True)
        assert process.stdin is not None
        process.stdin.write(self._config.model_dump_json().encode())
        await process.stdin.drain()
        process.stdin.close()
        self.pid, self.starts = process.pid, self.starts + 1
        log.info("triage noise worker started (pid %d, app %s)", process.pid, self._config.app_id)
        return process

    async def _wait(self, process: asyncio.subprocess.Process, stop: asyncio.Event) -> bool:
        """True if the child exited on its own, False if ``stop`` came first."""
        exited = asyncio.create_task(process.wait())
        stopped = asyncio.create_task(stop.wait())
        done, _ = await asyncio.wait({exited, stopped}, return_when=asyncio.FIRST_COMPLETED)
        stopped.cancel()
        if exited not in done:
            exited.cancel()
        return exited in done

    async def _terminate(self, process: asyncio.subprocess.Process) -> None:
        """SIGTERM, wait up to ``stop_timeout``, then SIGKILL; always reaped."""
        if process.returncode is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            process.terminate()
        try:
            await asyncio.wait_for(asyncio.shield(process.wait()), self._stop_timeout.total_seconds())
        except TimeoutError:
            log.warning("triage noise worker did not stop within %s; killing it", self._stop_timeout)
            with contextlib.suppress(ProcessLookupError):
                process.kill()
            await process.wait()
