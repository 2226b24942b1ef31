"""Benchmark: does a new incident wait behind an alert storm?

Starts a whole ``ira dev`` (every role, embedded broker, Redis, SQLite), drives a storm of
distinct alerts into K incidents through the Alertmanager webhook with a raw asyncio HTTP/1.1
client (keep-alive connections; httpx would measure itself), and while the storm runs posts an
alert of a NEW incident every few seconds, timing POST -> its run exists. At the end it reads
the coordinator's consumer lag from ``/metrics``, the size of the storm incidents' run logs and
how many approvals each storm run asked for (one per draft version).

Usage: python bench/storm.py [--rate 300] [--seconds 30] [--incidents 10] [--new-every 3]
(JSON lines on stdout, progress on stderr)
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import yaml

from ira.runtime.settings import render_config_template
from ira.runtime.settings.model import SourceSettings

TOKEN = "dev-am-token"
PATH = "/v1/sources/alertmanager/am"
ADMIN = "dev-admin-token"


def progress(message: str) -> None:
    print(f"storm: {message}", file=sys.stderr, flush=True)


def emit(record: dict[str, object]) -> None:
    print(json.dumps({"bench": "storm", **record}), flush=True)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def config(home: Path) -> Path:
    """The dev defaults with the edge's request and alert rates out of the storm's way."""
    data = yaml.safe_load(render_config_template())
    counts_alerts = "alerts_per_second" in SourceSettings.model_fields  # older ira counted requests only
    for source in data["sources"]:
        source["rate_limit_per_second"] = 1_000_000
        if counts_alerts:
            source["alerts_per_second"] = 100_000_000
    data["log_level"] = "WARNING"
    path = home / "ira.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


class Http:
    """One keep-alive HTTP/1.1 connection: enough for POST/GET with small JSON answers."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def request(self, method: str, path: str, body: bytes = b"", token: str = ADMIN) -> tuple[int, bytes]:
        """One request; a connection the server closed while idle (keep-alive timeout) is reopened once."""
        for attempt in range(2):
            if self.writer is None or self.writer.is_closing() or attempt:
                await self.close()
                self.reader, self.writer = await asyncio.open_connection("127.0.0.1", self.port)
            assert self.reader is not None and self.writer is not None
            head = (f"{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {token}\r\n"
                    f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n")
            try:
                self.writer.write(head.encode() + body)
                await self.writer.drain()
                status_line = await self.reader.readline()
            except ConnectionError:
                status_line = b""
            if status_line:
                break
        else:
            raise ConnectionError(f"{method} {path}: the server closed the connection")
        status = int(status_line.split()[1])
        length, chunked = 0, False
        while (line := await self.reader.readline()) not in (b"\r\n", b""):
            name, _, value = line.decode("latin-1").partition(":")
            if name.lower() == "content-length":
                length = int(value)
            elif name.lower() == "transfer-encoding" and "chunked" in value:
                chunked = True
        if not chunked:
            return status, await self.reader.readexactly(length)
        parts = []
        while (size := int((await self.reader.readline()).strip(), 16)) > 0:
            parts.append(await self.reader.readexactly(size))
            await self.reader.readline()
        await self.reader.readline()
        return status, b"".join(parts)

    async def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
            self.writer = None


def webhook(alerts: list[dict[str, Any]]) -> bytes:
    return json.dumps({"receiver": "ira", "status": "firing", "alerts": alerts, "version": "4",
                       "groupKey": "{}", "externalURL": "http://bench"}).encode()


def alert(name: str, service: str, fingerprint: str, summary: str | None = None) -> dict[str, Any]:
    now = datetime.now(UTC).isoformat().replace("+00:00", "Z")
    return {"status": "firing", "labels": {"alertname": name, "service": service, "severity": "critical",
                                           "instance": fingerprint},
            "annotations": {"summary": summary or f"{name} on {service}"}, "startsAt": now,
            "endsAt": "0001-01-01T00:00:00Z", "fingerprint": fingerprint}


async def storm(port: int, *, rate: int, seconds: float, incidents: int, batch: int, stop: asyncio.Event,
                counts: dict[str, int], connections: int = 8) -> None:
    """``rate`` distinct alerts a second in batches of ``batch``, spread over ``incidents`` groups,
    from ``connections`` keep-alive connections posting side by side."""
    started = time.monotonic()

    async def sender(index: int) -> None:
        http, sent = Http(port), 0
        share = rate / connections
        try:
            while not stop.is_set() and time.monotonic() - started < seconds:
                if sent + batch > (time.monotonic() - started) * share:
                    await asyncio.sleep(0.005)  # the generator's pace
                    continue
                group = (index + sent // batch) % incidents
                body = webhook([alert(f"Storm{group}", "storm", uuid.uuid4().hex[:16]) for _ in range(batch)])
                status, _ = await http.request("POST", PATH, body, TOKEN)
                key = "accepted" if status == 202 else f"http_{status}"
                counts[key] = counts.get(key, 0) + batch
                sent += batch
        finally:
            await http.close()

    await asyncio.gather(*(sender(i) for i in range(connections)))


async def run_of(client: Http, marker: str) -> dict[str, Any] | None:
    status, body = await client.request("GET", "/v1/runs?limit=500")
    if status != 200:
        return None
    return next((r for r in json.loads(body)["runs"] if marker in (r.get("title") or "")), None)


async def new_incidents(port: int, *, every: float, seconds: float, timeout: float,
                        posts: list[tuple[str, datetime, float]] | None = None) -> list[float]:
    """Post a new incident's alert every ``every`` s during the storm; seconds until its run exists.
    ``posts`` collects (alertname, posted at, seconds to its run) for :func:`hops`."""
    client, poster, found = Http(port), Http(port), []
    started = time.monotonic()
    i = 0
    try:
        while time.monotonic() - started < seconds:
            marker = f"fresh incident {uuid.uuid4().hex[:8]}"
            body = webhook([alert(f"Fresh{i}", f"fresh-{i}", uuid.uuid4().hex[:16], summary=marker)])
            posted, posted_at = time.monotonic(), datetime.now(UTC)
            status, _ = await poster.request("POST", PATH, body, TOKEN)
            if status == 202:
                while time.monotonic() - posted < timeout:
                    if await run_of(client, marker):
                        found.append(time.monotonic() - posted)
                        break
                    await asyncio.sleep(0.1)  # polling interval of the measurement
                else:
                    found.append(float("inf"))
                if posts is not None:
                    posts.append((f"Fresh{i}", posted_at, found[-1]))
            i += 1
            await asyncio.sleep(max(0.0, every - (time.monotonic() - posted)))
    finally:
        await client.close()
        await poster.close()
    return found


HOPS = (
    ("gateway", "posted", "received"),
    ("alert_relay", "received", "alert_sent"),
    ("triage_fetch", "alert_sent", "triaged"),
    ("triage", "triaged", "decided"),
    ("decision_relay", "decided", "decision_sent"),
    ("coordinator_fetch", "decision_sent", "coordinator"),
    ("coordinator", "coordinator", "run"),
    ("seen", "run", "seen"),
)
"""Where a new incident's alert spent its time, from the store's own timestamps: the alert's
receipt and its outbox row's send, triage's inbox row (start of its batch's transaction) and the
create_run decision, the decision's outbox send, the coordinator's inbox row, the run row, and
the bench's poll that saw the run. An alert or a decision handed over in-process (eager) is
applied before its outbox row is sent: ``alert_relay`` / ``decision_relay`` is then 0 and
``triage_fetch`` / ``coordinator_fetch`` counts from the receipt / the decision."""


def _at(value: str | None) -> datetime | None:
    return None if value is None else datetime.fromisoformat(value).replace(tzinfo=UTC)


def hops(database: Path, posts: list[tuple[str, datetime, float]]) -> list[dict[str, float | None]]:
    """Each new incident's wait per hop, in seconds (None where the hop did not happen yet)."""
    import sqlite3

    found: list[dict[str, float | None]] = []
    sent = "SELECT sent_at FROM outbox WHERE message_id = ?"
    applied = "SELECT received_at FROM inbox WHERE consumer = ? AND message_id = ?"
    with sqlite3.connect(f"file:{database}?mode=ro", uri=True, timeout=30) as db:

        def at(sql: str, *args: str) -> datetime | None:
            row = db.execute(sql, args).fetchone()
            return _at(row[0]) if row else None

        for name, posted_at, waited in posts:
            times: dict[str, datetime | None] = {"posted": posted_at}
            if waited != float("inf"):
                times["seen"] = posted_at + timedelta(seconds=waited)
            row = db.execute("SELECT event_id, received_at FROM alerts WHERE name = ? ORDER BY received_at LIMIT 1",
                             (name,)).fetchone()
            decision = None if row is None else db.execute(
                "SELECT evaluation_id, at FROM decisions WHERE event_id = ? AND decision = 'create_run'",
                (row[0],)).fetchone()
            if row is not None:
                times.update(received=_at(row[1]), alert_sent=at(sent, row[0]), triaged=at(applied, "triage", row[0]))
            if decision is not None:
                times.update(decided=_at(decision[1]), decision_sent=at(sent, decision[0]),
                             coordinator=at(applied, "coordinator", decision[0]),
                             run=at("SELECT created_at FROM runs WHERE idempotency_key = ?", decision[0]))
            for applied_at, sent_at, since in (("triaged", "alert_sent", "received"),
                                               ("coordinator", "decision_sent", "decided")):
                a, b = times.get(applied_at), times.get(sent_at)
                if a and b and a < b:  # handed over in-process (eager), before the relay sent it
                    times[sent_at] = times[since]
            hop: dict[str, float | None] = {}
            for label, start, end in HOPS:
                a, b = times.get(start), times.get(end)
                hop[label] = round(max(0.0, (b - a).total_seconds()), 3) if a and b else None
            found.append(hop)
    return found


def hop_summary(per_incident: list[dict[str, float | None]]) -> dict[str, object]:
    """p50 / max seconds of each hop over the new incidents."""
    summary: dict[str, object] = {}
    for label, _, _ in HOPS:
        values = sorted(v for h in per_incident if (v := h.get(label)) is not None)
        summary[label] = [round(statistics.median(values), 3), values[-1]] if values else None
    return summary


def lag(metrics: str, consumer: str) -> int:
    pattern = re.compile(r'^ira_consumer_lag_messages\{consumer="' + re.escape(consumer) + r'".*\} (\S+)$', re.M)
    return int(sum(float(v) for v in pattern.findall(metrics)))


async def main_async(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory(prefix="ira-storm-") as tmp:
        home, port = Path(tmp), free_port()
        env = {k: v for k, v in os.environ.items() if not k.startswith(("IRA_", "OTEL_"))}
        env.update(IRA_DATA_DIR=str(home / "data"), IRA_CONFIG=str(config(home)), IRA_HTTP_PORT=str(port))
        ira = str(Path(sys.executable).with_name("ira"))
        with (home / "dev.log").open("wb") as log:
            proc = subprocess.Popen([ira, "dev"], cwd=home, env=env, stdout=log, stderr=subprocess.STDOUT,
                                    start_new_session=True)
        try:
            probe = Http(port)
            deadline = time.monotonic() + 120
            while True:
                try:
                    if (await probe.request("GET", "/readyz"))[0] == 200:
                        break
                except OSError:
                    await probe.close()
                    probe = Http(port)
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise SystemExit(f"ira dev did not get ready; see {home / 'dev.log'}")
                await asyncio.sleep(0.25)
            progress(f"ira dev ready on :{port}; storm of {args.rate} alerts/s into {args.incidents} incidents "
                     f"for {args.seconds:g}s, a new incident every {args.new_every:g}s")
            stop, load_start = asyncio.Event(), os.getloadavg()[0]
            counts: dict[str, int] = {}
            storming = asyncio.create_task(storm(port, rate=args.rate, seconds=args.seconds, incidents=args.incidents,
                                                 batch=args.batch, stop=stop, counts=counts))
            await asyncio.sleep(min(5.0, args.seconds / 4))  # let the storm's own runs start first
            posts: list[tuple[str, datetime, float]] = []
            waits = await new_incidents(port, every=args.new_every, seconds=args.seconds - 5, timeout=args.timeout,
                                        posts=posts)
            stop.set()
            await storming
            metrics = (await probe.request("GET", "/metrics"))[1].decode()
            storm_runs = [r for r in json.loads((await probe.request("GET", "/v1/runs?limit=500"))[1])["runs"]
                          if (r.get("title") or "").startswith("Storm")]
            approvals = [len(json.loads((await probe.request("GET", f"/v1/runs/{r['run_id']}"))[1])["approvals"])
                         for r in storm_runs]
            await probe.close()
            per_hop = hops(home / "data" / "ira.db", posts)
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGINT)
                try:
                    proc.wait(timeout=60)
                except subprocess.TimeoutExpired:
                    os.killpg(proc.pid, signal.SIGKILL)
            else:
                progress("ira dev exited early:\n" + (home / "dev.log").read_text()[-2000:])
        done = sorted(w for w in waits if w != float("inf"))
        emit({"measure": "new_incident_to_run", "posted": len(waits), "found": len(done),
              "p50_s": round(statistics.median(done), 3) if done else None,
              "p99_s": round(done[min(len(done) - 1, int(len(done) * 0.99))], 3) if done else None,
              "max_s": round(done[-1], 3) if done else None,
              "load_avg_1m_start_end": [round(load_start, 2), round(os.getloadavg()[0], 2)]})
        emit({"measure": "new_incident_hops_p50_max_s", **hop_summary(per_hop)})
        for name_posted, hop in zip(posts, per_hop, strict=True):
            progress(f"{name_posted[0]}: " + ", ".join(f"{k} {v}" for k, v in hop.items()))
        emit({"measure": "storm", "alerts_per_s": args.rate, "seconds": args.seconds, "incidents": args.incidents,
              **counts, "storm_runs": len(storm_runs),
              "run_events_per_incident_max": max((r["last_seq"] for r in storm_runs), default=0),
              "run_events_per_incident_p50": statistics.median(r["last_seq"] for r in storm_runs) if storm_runs else 0,
              "approvals_per_incident_max": max(approvals, default=0)})
        emit({"measure": "outbox_at_end", **{m.group(1): int(float(m.group(2))) for m in re.finditer(
            r'^ira_outbox_unsent_messages\{topic="([^"]+)"\} (\S+)$', metrics, re.M)}})
        emit({"measure": "lag_at_end", **{c: lag(metrics, c) for c in (
            "triage", "coordinator", "coordinator-updates", "coordinator-steps", "agents-steps", "notifier")}})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rate", type=int, default=300, help="storm alerts per second")
    parser.add_argument("--seconds", type=float, default=30)
    parser.add_argument("--incidents", type=int, default=10, help="groups the storm's alerts fall into")
    parser.add_argument("--batch", type=int, default=10, help="alerts per webhook request")
    parser.add_argument("--new-every", type=float, default=3, help="seconds between new incidents")
    parser.add_argument("--timeout", type=float, default=60, help="give up on a new incident's run after this")
    parser.add_argument("--ops", type=int, help="smoke run (make bench): a short, small storm")
    args = parser.parse_args()
    if args.ops is not None:
        args.rate, args.seconds, args.incidents, args.new_every = 100, 12, 3, 3
    asyncio.run(main_async(args))


if __name__ == "__main__":
    main()
