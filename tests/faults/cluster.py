"""The fault harness's cluster: real services and real ira processes it can hurt on purpose.

One :class:`Cluster` per case: a fresh PostgreSQL database, a Redis server on a loopback port
and a Tansu broker — all "external" to ira (ira connects to them as a scale-out worker
does), so the harness can kill and restart each one. On top run ira processes (``ira dev``
with every role, or ``ira worker --role ...``), each in its own process group. Like an
orchestrator, the cluster restarts a process that exited (without its fault points: a fault
fires once), until the case is over.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import uuid
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from importlib.util import find_spec
from pathlib import Path
from typing import Any

import asyncpg
import yaml

from ira.infra.demo import DEMO_BUNDLE
from ira.infra.redis_server import EmbeddedRedis
from ira.infra.tansu import EmbeddedKafka
from tests.processes import free_port, ira_command
from tests.services import postgres_test_url

TEMPLATE = Path(__file__).resolve().parents[2] / "ira" / "runtime" / "settings" / "template.yaml"
TUNING: dict[str, Any] = {
    "kafka": {"session_timeout": "2s"},
    "runtime": {"step_lease": "3s", "scanner_interval": "1s", "outbox_claim_lease": "3s", "drain_timeout": "15s"},
    "triage": {"noise": {"enabled": False}},
}
"""Short leases and sessions: a case measures recovery in seconds, not in production minutes."""
INGEST_LANDED = find_spec("ira.sources.accept") is not None
"""The store-ack ingest and the scanner's re-sends are on this branch (issue 18's first half)."""
if INGEST_LANDED:  # the scanner re-sends what was sent but never applied: within seconds here
    TUNING["runtime"]["resend_after"] = "2s"


def case_config(tmp: Path, extra: dict[str, Any] | None = None) -> Path:
    """The dev configuration (sources, tokens) with the harness's tuning and the demo recording."""
    config = yaml.safe_load(TEMPLATE.read_text())
    for section, values in {**TUNING, **(extra or {})}.items():
        config[section] = _merged(config.get(section) or {}, values)
    config.setdefault("agents", {})["recorded_bundle"] = str(DEMO_BUNDLE)
    path = tmp / "ira.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def _merged(base: dict[str, Any], values: dict[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    for key, value in values.items():
        merged[key] = _merged(merged.get(key) or {}, value) if isinstance(value, dict) else value
    return merged


@dataclass
class IraProcess:
    """One ira command line; restarted by :meth:`Cluster.keep_running` whenever it exits."""

    name: str
    args: Sequence[str]
    env: dict[str, str]
    log_path: Path
    faults: str = ""
    port: int = field(default_factory=free_port)
    proc: asyncio.subprocess.Process | None = None
    exits: list[int] = field(default_factory=list)
    """Exit codes of earlier lives (-9: killed)."""

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def start(self, *, armed: bool) -> None:
        env = self.env | {"IRA_HTTP_PORT": str(self.port), "IRA_FAULTS": self.faults if armed else ""}
        with self.log_path.open("ab") as log:
            log.write(f"--- start (faults: {env['IRA_FAULTS'] or '-'})\n".encode())
            self.proc = await asyncio.create_subprocess_exec(
                ira_command(), *self.args, env=env, cwd=self.log_path.parent, stdout=log,
                stderr=asyncio.subprocess.STDOUT, start_new_session=True)

    def signal_group(self, sig: signal.Signals) -> None:
        """``sig`` to the process group: ira and any child of its own."""
        if self.proc is not None and self.proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, sig)

    def last_error(self) -> str:
        errors = [line for line in self.log_path.read_text(errors="replace").splitlines() if '"ERROR"' in line]
        return errors[-1][:500] if errors else "(no error logged)"

    def log_tail(self, lines: int = 30) -> str:
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])


class Cluster:
    """Services and processes of one case (see the module docstring)."""

    def __init__(self, tmp: Path, *, database_url: str, redis: EmbeddedRedis, broker: EmbeddedKafka) -> None:
        self.tmp, self.database_url, self.redis, self.broker = tmp, database_url, redis, broker
        self.processes: list[IraProcess] = []
        self.notes: list[str] = []
        """What happened that the table should mention (an action that missed its moment)."""
        self._keepers: list[asyncio.Task[None]] = []
        self._closing = False

    def add(self, name: str, *args: str, faults: str = "", config: Path, own_broker: bool = False) -> IraProcess:
        """An ira process on this cluster's services; ``own_broker``: ``ira dev``'s embedded broker
        instead (it lives and dies with the process: what a stop must drain)."""
        assert self.redis.tcp_url is not None
        env = {k: v for k, v in os.environ.items() if not k.startswith("IRA_")} | {
            "IRA_CONFIG": str(config), "IRA_DATA_DIR": str(self.tmp / name), "IRA_DATABASE_URL": self.database_url,
            "IRA_REDIS_URL": self.redis.tcp_url}
        if not own_broker:
            env["IRA_KAFKA_BOOTSTRAP"] = self.broker.bootstrap
        process = IraProcess(name, args, env, self.tmp / f"{name}.log", faults=faults)
        self.processes.append(process)
        return process

    async def start(self) -> None:
        for process in self.processes:
            await process.start(armed=True)
            self._keepers.append(asyncio.create_task(self._keep_running(process)))

    async def _keep_running(self, process: IraProcess) -> None:
        """Restart ``process`` whenever it exits, disarmed, until the case is over."""
        while True:
            assert process.proc is not None
            code = await process.proc.wait()
            if self._closing:
                return
            process.exits.append(code)
            if code not in (0, -signal.SIGKILL):  # neither a clean stop nor a kill: a crash to explain
                self.notes.append(f"{process.name} exited {code}: {process.last_error()}")
            await process.start(armed=False)

    async def kill_broker(self) -> None:
        """The broker dies and comes back empty on the same port (Tansu's memory storage)."""
        await self.broker.kill()
        await self.broker.start()

    async def kill_redis(self) -> None:
        """Redis dies and comes back empty on the same port."""
        os.kill(self.redis.pid, signal.SIGKILL)
        await asyncio.to_thread(self.redis.restart)

    async def cut_database(self) -> int:
        """Terminate every server process of this case's database: every pooled connection of
        every ira process breaks at once. Returns how many were cut."""
        conn = await asyncpg.connect(postgres_test_url())
        try:
            name = self.database_url.rsplit("/", 1)[1]
            rows = await conn.fetch("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                                    "WHERE datname = $1 AND pid <> pg_backend_pid()", name)
        finally:
            await conn.close()
        return len(rows)

    async def stop(self) -> None:
        """SIGTERM every process (a clean stop), SIGKILL what is left after 30 s."""
        self._closing = True
        for process in self.processes:
            process.signal_group(signal.SIGTERM)
        for process in self.processes:
            if process.proc is None:
                continue
            try:
                await asyncio.wait_for(process.proc.wait(), 30)
            except TimeoutError:
                process.signal_group(signal.SIGKILL)
                await process.proc.wait()
        for keeper in self._keepers:
            keeper.cancel()
        await asyncio.gather(*self._keepers, return_exceptions=True)


@asynccontextmanager
async def cluster(tmp: Path) -> AsyncIterator[Cluster]:
    """A fresh database, Redis and broker; everything stopped and dropped on exit."""
    name = f"faults_{uuid.uuid4().hex[:10]}"
    admin = await asyncpg.connect(postgres_test_url(), timeout=5)
    await admin.execute(f'CREATE DATABASE "{name}"')
    await admin.close()
    redis = await asyncio.to_thread(EmbeddedRedis(tmp / "redis", tcp_port=0).start)
    broker = EmbeddedKafka(tmp / "broker")
    await broker.start()
    built = Cluster(tmp, database_url=postgres_test_url().rsplit("/", 1)[0] + f"/{name}", redis=redis,
                    broker=broker)
    try:
        yield built
    finally:
        await built.stop()
        await broker.stop()
        await asyncio.to_thread(redis.stop)
        admin = await asyncpg.connect(postgres_test_url(), timeout=5)
        await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        await admin.close()
