"""``ira dev`` as a real process for fault tests: start it, kill its whole process group, start it
again on the same data, post bursts at it, and read what triage stored."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import yaml
from sqlalchemy import func, select

from ira.core.alert import ALERTS_INBOX
from ira.runtime.settings import render_config_template
from ira.runtime.store.database import Database
from ira.runtime.store.schema import decisions, inbox
from tests.eventually import eventually
from tests.processes import alive, descendants_and_holders, free_port, ira_command
from tests.sources.harness import AM, AM_TOKEN
from tests.sources.rawhttp import RawConnection

FAST_RUNTIME = {"relay_poll_interval": "50ms", "scanner_interval": "500ms", "resend_after": "2s",
                "outbox_claim_lease": "3s"}
"""Lost messages found within seconds, not the production half minute."""


def dev_config(path: Path, **overrides: Any) -> Path:
    """The dev defaults with the rate limits out of the way, fast re-sends, no noise worker."""
    config = yaml.safe_load(render_config_template())
    for source in config["sources"]:
        source["rate_limit_per_second"] = 100_000
    config["ingest"]["alerts_per_second"] = 100_000  # the alert bucket too: a fast re-send is not a flood
    config["runtime"].update(FAST_RUNTIME)
    config["kafka"]["session_timeout"] = "2s"
    config["triage"]["noise"]["enabled"] = False
    config["log_level"] = "WARNING"
    config.update(overrides)
    path.write_text(yaml.safe_dump(config))
    return path


@dataclass
class DevProcess:
    """One ``ira dev`` (or ``ira worker``) on a data dir that outlives it; restartable."""

    home: Path
    env: dict[str, str]
    command: Sequence[str] = ("dev",)
    proc: subprocess.Popen[bytes] | None = None
    port: int = field(default_factory=free_port)
    starts: int = 0

    @classmethod
    def on(cls, home: Path, *, command: Sequence[str] = ("dev",), **env: str) -> DevProcess:
        base = {k: v for k, v in os.environ.items() if not k.startswith(("IRA_", "OTEL_"))}
        base.update(IRA_DATA_DIR=str(home / "data"), IRA_CONFIG=str(dev_config(home / "ira.yaml")), **env)
        return cls(home=home, env=base, command=command)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def database_url(self) -> str:
        return self.env.get("IRA_DATABASE_URL") or f"sqlite:///{self.home / 'data' / 'ira.db'}"

    def log(self) -> str:
        return (self.home / f"dev{self.starts}.log").read_text()[-3000:]

    async def start(self) -> None:
        """Start and wait (bounded) for ``/readyz`` 200. A new process group, so it can be killed whole."""
        self.launch()
        await self.wait_ready()

    def launch(self) -> None:
        """Start it, without waiting for anything."""
        self.starts += 1
        with (self.home / f"dev{self.starts}.log").open("wb") as out:
            self.proc = subprocess.Popen([ira_command(), *self.command], cwd=self.home, stdout=out,  # noqa: S603
                                         stderr=subprocess.STDOUT, start_new_session=True,
                                         env={**self.env, "IRA_HTTP_PORT": str(self.port)})

    async def wait_ready(self) -> None:
        """Bounded wait for ``/readyz`` 200 (fails at once if the process died)."""
        await eventually(self._ready, timeout=90, interval=0.25, message=f"ira {' '.join(self.command)} ready")

    async def _ready(self) -> bool:
        assert self.proc is not None and self.proc.poll() is None, self.log()
        try:
            async with httpx.AsyncClient() as client:
                return (await client.get(f"{self.base_url}/readyz", timeout=2)).status_code == 200
        except httpx.TransportError:
            return False

    def helpers(self) -> set[int]:
        """Its children and whatever holds its data dir, except this test process (which may
        have the database open)."""
        assert self.proc is not None
        return descendants_and_holders(self.proc.pid, str(self.home / "data")) - {os.getpid()}

    def kill(self) -> None:
        """SIGKILL the process group, then whatever still holds the data dir (the embedded Redis
        daemonizes out of the group): a machine losing the whole of ira at once."""
        assert self.proc is not None
        helpers = self.helpers()
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=30)
        _kill(helpers | self.helpers())

    async def stop(self) -> None:
        """Ctrl-C, bounded; a kill if it does not stop in time."""
        if self.proc is None or self.proc.poll() is not None:
            return
        helpers = self.helpers()
        self.proc.send_signal(signal.SIGINT)
        try:
            await asyncio.to_thread(self.proc.wait, 30)
        except subprocess.TimeoutExpired:
            self.kill()
        _kill(helpers)


def _kill(pids: set[int]) -> None:
    """SIGKILL each live one of ``pids`` (processes a test started, by id)."""
    for pid in alive(pids - {os.getpid()}):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


@dataclass
class Burst:
    """Posts bodies over many keep-alive connections until done or the server dies; keeps every 202."""

    accepted: dict[str, int] = field(default_factory=dict)
    """event id -> how many 202 answers said this request accepted it."""
    answered: list[str] = field(default_factory=list)
    """Every event id of every 202 (accepted or duplicate): all of them must be stored."""
    refused: int = 0

    async def post(self, base_url: str, bodies: Sequence[bytes], *, connections: int = 32,
                   headers: Mapping[str, str] | None = None, path: str = AM) -> None:
        queue = iter(bodies)

        async def sender() -> None:
            try:
                connection = await RawConnection.open(base_url)
            except OSError:
                return
            try:
                for body in queue:
                    response = await connection.post(path, body, headers or {"authorization": f"Bearer {AM_TOKEN}"})
                    if response.status != 202:
                        self.refused += 1
                        continue
                    answer = json.loads(response.body)
                    self.answered += answer["event_ids"]
                    if answer["accepted"]:
                        for event_id in answer["event_ids"]:
                            self.accepted[event_id] = self.accepted.get(event_id, 0) + 1
            except (OSError, asyncio.IncompleteReadError, IndexError, ValueError):
                return  # the server died mid-request: that request got no 202
            finally:
                with contextlib.suppress(OSError):
                    await connection.close()

        await asyncio.gather(*(sender() for _ in range(connections)))


async def triaged(database_url: str, event_ids: set[str]) -> tuple[Counter[str], Counter[str]]:
    """Of ``event_ids``: triage's inbox rows and evaluations, per event id."""
    db = Database.create(database_url)
    try:
        async with db.reader() as conn:
            applied = await _count(conn, select(inbox.c.message_id, func.count()).where(
                inbox.c.consumer == ALERTS_INBOX).group_by(inbox.c.message_id), event_ids)
            evaluated = await _count(conn, select(decisions.c.event_id, func.count()).group_by(decisions.c.event_id),
                                     event_ids)
    finally:
        await db.close()
    return applied, evaluated


async def _count(conn: Any, query: Any, wanted: set[str]) -> Counter[str]:
    return Counter({key: n for key, n in (await conn.execute(query)).all() if key in wanted})


async def until_triaged(database_url: str, event_ids: set[str], *, timeout: float = 90) -> Counter[str]:
    """Wait (bounded) until triage applied every one of ``event_ids``; returns evaluations per id."""

    async def every_one() -> Counter[str]:
        applied, evaluated = await triaged(database_url, event_ids)
        missing = event_ids - set(applied)
        assert not missing, f"{len(missing)} of {len(event_ids)} accepted events not triaged"
        return evaluated

    return await eventually(every_one, timeout=timeout, interval=1.0)

