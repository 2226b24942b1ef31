"""Real Alertmanagers for tests (the Debian package), on 127.0.0.1 only, plus a scrape target.

::

    async with start_alertmanager(tmp_path, ALERTMANAGER_YML) as am_url:
        ...

Each Alertmanager gets a directory of its own under ``tmp_path`` (config, data,
``process.log``), a free loopback port, no cluster gossip (``--cluster.listen-address=``),
and is killed when the block exits (and by the kernel if the test process dies first). A
missing binary skips locally and fails in CI. Prometheus itself is started with
``tests.observability.start_prometheus``. ``serve_metrics`` exposes a prometheus_client
registry as a scrape target: flip a gauge in it to make a rule fire or resolve.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from pathlib import Path

import httpx
from prometheus_client import CollectorRegistry, start_http_server

from tests.eventually import eventually
from tests.processes import free_port
from tests.services import require_service

ALERTMANAGER_BINARIES = ("/usr/bin/prometheus-alertmanager", "prometheus-alertmanager", "alertmanager")
LOOPBACK = "127.0.0.1"


def find_binary(name: str, candidates: Sequence[str]) -> str:
    """The first candidate that exists (absolute) or is on PATH; skips/fails the test if none."""
    for candidate in candidates:
        found = candidate if os.path.isabs(candidate) and os.access(candidate, os.X_OK) else shutil.which(candidate)
        if found:
            return found
    require_service(name, f"none of {', '.join(candidates)} is installed")


def _die_with_parent() -> Callable[[], None] | None:
    """Linux: SIGKILL the child if the test process dies, so no daemon outlives a crashed run."""
    if not sys.platform.startswith("linux"):
        return None
    libc = ctypes.CDLL(None, use_errno=True)
    return lambda: libc.prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG


@contextlib.contextmanager
def _process(command: list[str], log_path: Path) -> Iterator[subprocess.Popen[bytes]]:
    with log_path.open("ab") as log:
        process = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,  # noqa: S603
                                   start_new_session=True, preexec_fn=_die_with_parent())
    try:
        yield process
    finally:
        if process.poll() is None:
            process.kill()
        process.wait(timeout=10)


async def _wait_ready(process: subprocess.Popen[bytes], url: str, log_path: Path, timeout: float) -> None:
    async def ready() -> bool:
        if process.poll() is not None:
            tail = log_path.read_text(errors="replace")[-2000:]
            raise RuntimeError(f"{process.args[0]} exited with {process.returncode}:\n{tail}")
        try:
            async with httpx.AsyncClient(timeout=1) as client:
                return (await client.get(url)).status_code == 200
        except httpx.TransportError:
            return False

    await eventually(ready, timeout=timeout, interval=0.1, message=f"{url} ready")


@contextlib.asynccontextmanager
async def start_alertmanager(
    tmp_path: Path, config_yaml: str, *, name: str = "alertmanager", startup_timeout: float = 30
) -> AsyncIterator[str]:
    """A standalone Alertmanager with ``config_yaml``; yields its URL.

    Two of them given the same alerts behave like an HA pair whose gossip is down: both notify.
    """
    binary = find_binary("alertmanager", ALERTMANAGER_BINARIES)
    directory = tmp_path / name
    directory.mkdir(parents=True)
    (directory / "alertmanager.yml").write_text(config_yaml)
    port = free_port()
    command = [binary, f"--config.file={directory / 'alertmanager.yml'}", f"--storage.path={directory / 'data'}",
               f"--web.listen-address={LOOPBACK}:{port}", "--cluster.listen-address=", "--log.level=warn"]
    with _process(command, directory / "process.log") as process:
        url = f"http://{LOOPBACK}:{port}"
        await _wait_ready(process, f"{url}/-/ready", directory / "process.log", startup_timeout)
        yield url


@contextlib.contextmanager
def serve_metrics(registry: CollectorRegistry) -> Iterator[str]:
    """Expose ``registry`` at ``http://127.0.0.1:<port>/metrics`` (a scrape target); yields ``host:port``."""
    port = free_port()
    server, thread = start_http_server(port, addr=LOOPBACK, registry=registry)
    try:
        yield f"{LOOPBACK}:{port}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
