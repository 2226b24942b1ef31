"""Ingest benchmark: alerts/s and POST -> 202 latency of ira's webhook, against references.

Usage: .venv/bin/python bench/ingest.py [--duration 6] [--rounds 3] [--connections 32] [--ops N]
       [--ack store,broker] [--untraced]
       .venv/bin/python bench/ingest.py --pipeline [--compare-alertmanager] [--duration 6] [--rounds 3]
       [--set runtime.relay_batch_size=500 ...] (any ira setting, for comparing tunings)

``--pipeline`` measures the whole ``ira dev`` instead (every role, the roles of
``dev.processes`` in child processes, its embedded broker and Redis, SQLite; the dev config with
the rate limits raised): alerts/s and p50/p99 as wrk sees them, and the CPU per alert of every
process of the ira dev tree (``ira dev`` itself, its children, the Tansu broker it started, the
Redis server it daemonized; ``/proc/<pid>/stat``), both over wrk's window and until triage had
handled every alert accepted in it (``cpu_ms_per_alert`` and ``cpu_ms_per_alert_drained``).
Whether triage keeps up: the backlog (alerts accepted at the edge minus alerts triage handled,
from ira's counters) sampled every second during the window, and how long after wrk stopped
triage needed to catch up (``caught_up_s``), and so the alerts/s the whole pipeline kept up with
(``alerts_per_s_triaged``: wrk's alerts over its window plus that catch-up; None if triage did not
catch up within ``--drain-limit``). With ``--compare-alertmanager`` a Debian
Alertmanager takes the same load in the same round, back to back, and the ratio lines compare
alerts/s and CPU per alert (``value`` >= 1 is ira ahead on throughput; for CPU, ira's ms per
alert over Alertmanager's).

What runs (all on this machine, on loopback):

* ``ira worker --role gateway`` (one uvicorn worker, tracing on as in production) on an
  embedded Tansu broker and an embedded Redis (unix socket), as ``ira dev`` would start
  them, and SQLite; only the HTTP edge runs, so triage and the other loops do not compete for
  the CPU. Once per commit point (``--ack``): ``ira`` answers after the store's commit
  (``ingest.ack: store``, the default), with the outbox relay in the same process moving the
  alerts on to the broker, as in ``ira dev`` (``bench/gateway_relay.py``; its CPU counts);
  ``ira_broker`` answers after the broker's acks (``ingest.ack: broker``). With
  ``--untraced``, also ``ira_untraced`` (store, ``OTEL_SDK_DISABLED=true``): what the
  OpenTelemetry middleware costs per request;
* the *raw chain* (``bench/raw_chain.py``): FastAPI -> Redis SET NX -> aiokafka
  send_and_wait, on the same broker and Redis: the ceiling the issue measures ingest against;
* a real Alertmanager (Debian package) receiving the same alerts on ``/api/v2/alerts``.

Load comes from ``wrk`` (``bench/ingest.lua`` builds every body, so alerts are distinct
unless the scenario says otherwise). Scenarios: 1 alert per request, 100 alerts per request,
and a 90% duplicate storm (1 alert per request, nine requests in ten re-send a hot alert).
Each scenario runs ``--rounds`` times; in a round every target runs back to back. Every run
prints one JSON line on stdout (with its ``round``; progress on stderr); then the ratio lines
give the median of the per-round ratios with their min and max: this machine's speed drifts
by up to 20 % within minutes, and a ratio of two runs taken far apart would measure that. wrk
is time-boxed, so ``--ops N`` (a smoke run, one round) makes each run last about N/1000 s.
Figures depend on the machine and on what else runs on it: every line carries the
1-minute load average before and after, and the server's CPU time per request. ``accepted``
and ``duplicates`` come from ira's own metrics (they include the requests still in flight
when wrk stopped counting, so they can exceed ``requests`` by up to ``--connections``).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import psutil
import yaml

from ira.core.envelope import Topic, topic_name
from ira.infra.redis_server import EmbeddedRedis
from ira.infra.tansu import EmbeddedKafka, free_port
from ira.runtime.settings import render_config_template

ROOT = Path(__file__).resolve().parents[1]
LUA = ROOT / "bench" / "ingest.lua"
IRA = Path(sys.executable).with_name("ira")
ALERTMANAGER = "/usr/bin/prometheus-alertmanager"
AM_TOKEN = "dev-am-token"
SCENARIOS = (("single", 1, 0), ("batch100", 100, 0), ("dup90", 1, 90))
_METRIC = re.compile(r'^(ira_source_events_(?:accepted|duplicate)_total)\{source="am"\} (\S+)$', re.M)
_TRIAGED = re.compile(r'^ira_messages_(?:handled|duplicate)_total\{consumer="triage"\} (\S+)$', re.M)
_TRIAGE_LAG = re.compile(r'^ira_consumer_lag_messages\{consumer="triage",[^}]*\} (\S+)$', re.M)


def progress(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def emit(record: dict[str, object]) -> None:
    print(json.dumps(record), flush=True)


@dataclass(frozen=True)
class Target:
    """A server under load: where to post, in which format, and its process (for CPU time)."""

    name: str
    url: str
    format: str
    pid: int
    headers: tuple[str, ...] = ()
    others: tuple[int, ...] = ()
    """Further processes whose CPU is the target's too (the ira dev tree: broker, Redis)."""
    pipeline: bool = False
    """The whole ira dev: measured until triage caught up (``measure_pipeline``)."""
    home: str = ""
    """ira dev's working directory (where ``bench/task_sampler.py`` writes)."""

    @property
    def pids(self) -> tuple[int, ...]:
        return (self.pid, *self.others)


def cpu_seconds(pid: int) -> float:
    """user + system CPU of one process so far (0 once it is gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except FileNotFoundError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def process_name(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except FileNotFoundError:
        return str(pid)


def cpu_of(target: Target) -> dict[int, float]:
    return {pid: cpu_seconds(pid) for pid in target.pids}


def wait_ready(url: str, process: subprocess.Popen[bytes], log: Path, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"{process.args} exited {process.returncode}:\n{log.read_text()[-3000:]}")
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(url, timeout=2).status_code == 200:
                return
        time.sleep(0.2)
    raise RuntimeError(f"{url} not ready after {timeout}s:\n{log.read_text()[-3000:]}")


@contextlib.contextmanager
def started(command: list[str], *, env: dict[str, str], log: Path, ready_url: str) -> Iterator[int]:
    """Run a server process until the block ends; yields its pid once ``ready_url`` answers 200."""
    with log.open("ab") as out:
        process = subprocess.Popen(command, env=env, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT,  # noqa: S603
                                   start_new_session=True)
    try:
        wait_ready(ready_url, process, log)
        yield process.pid
    finally:
        process.terminate()
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


OVERRIDES: list[tuple[str, object]] = []
"""``--set section.key=value`` settings applied to every ira config (e.g. runtime.relay_batch_size=500)."""


def ira_config(tmp: Path, ack: str) -> Path:
    """The dev config, with rate limits out of the way (the benchmark measures throughput)."""
    config = yaml.safe_load(render_config_template())
    for source in config["sources"]:
        source["rate_limit_per_second"] = 1_000_000
        source["alerts_per_second"] = 100_000_000
    config.update(log_level="WARNING", data_dir=str(tmp), ingest={"ack": ack})
    for dotted, value in OVERRIDES:
        *sections, key = dotted.split(".")
        node = config
        for section in sections:
            node = node.setdefault(section, {})
        node[key] = value
    path = tmp / "ira.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


@contextlib.contextmanager
def ira_gateway(tmp: Path, bootstrap: str, redis_url: str, *, ack: str = "store", traced: bool = True
                ) -> Iterator[Target]:
    """``ira worker --role gateway``, or with ``ack="store"`` the gateway and the relay in one
    process (``bench/gateway_relay.py``); ``traced=False`` sets OTEL_SDK_DISABLED (no-op spans)."""
    tmp.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("IRA_", "OTEL_"))}
    env.update(IRA_CONFIG=str(ira_config(tmp, ack)), IRA_KAFKA_BOOTSTRAP=bootstrap, IRA_REDIS_URL=redis_url,
               IRA_DATABASE_URL=f"sqlite:///{tmp / 'ira.db'}", IRA_DATA_DIR=str(tmp))
    if not traced:
        env["OTEL_SDK_DISABLED"] = "true"
    subprocess.run([str(IRA), "db", "upgrade"], env=env, cwd=tmp, check=True, capture_output=True)  # noqa: S603
    name = ("ira" if ack == "store" else f"ira_{ack}") + ("" if traced else "_untraced")
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    # store: the relay is part of every alert's path; it runs in the gateway's process, as in ira dev
    command = [sys.executable, "-m", "bench.gateway_relay"] if ack == "store" else [
        str(IRA), "worker", "--role", "gateway"]
    with started(command, env={**env, "IRA_HTTP_PORT": str(port)}, log=tmp / f"{name}.log",
                 ready_url=f"{url}/readyz") as pid:
        yield Target(name, f"{url}/v1/sources/alertmanager/am", "webhook", pid,
                     ("Content-Type: application/json", f"Authorization: Bearer {AM_TOKEN}"))


@contextlib.contextmanager
def raw_chain(tmp: Path, bootstrap: str, redis_url: str) -> Iterator[Target]:
    port = free_port()
    env = {**os.environ, "RAW_REDIS_URL": redis_url, "RAW_KAFKA": bootstrap,
           "RAW_TOPIC": topic_name(Topic.ALERTS, "rawbench")}
    command = [sys.executable, "-m", "uvicorn", "--factory", "bench.raw_chain:create_app", "--host", "127.0.0.1",
               "--port", str(port), "--log-level", "warning", "--no-access-log"]
    with started(command, env=env, log=tmp / "raw.log", ready_url=f"http://127.0.0.1:{port}/docs") as pid:
        yield Target("raw_chain", f"http://127.0.0.1:{port}/raw", "webhook", pid,
                     ("Content-Type: application/json",))


@contextlib.contextmanager
def alertmanager(tmp: Path) -> Iterator[Target]:
    directory = tmp / "alertmanager"
    directory.mkdir()
    (directory / "am.yml").write_text("route:\n  receiver: 'null'\n  group_wait: 30s\nreceivers:\n  - name: 'null'\n")
    port = free_port()
    command = [ALERTMANAGER, f"--config.file={directory / 'am.yml'}", f"--storage.path={directory / 'data'}",
               f"--web.listen-address=127.0.0.1:{port}", "--cluster.listen-address=", "--log.level=warn"]
    with started(command, env=dict(os.environ), log=directory / "log", ready_url=f"http://127.0.0.1:{port}/-/ready") \
            as pid:
        yield Target("alertmanager", f"http://127.0.0.1:{port}/api/v2/alerts", "api", pid,
                     ("Content-Type: application/json",))


def dev_tree(pid: int, data_dir: Path) -> tuple[int, ...]:
    """The processes of an ``ira dev`` besides itself: its children (the broker), and the
    embedded Redis, which daemonizes (not a child; its pid is in ``redis/server.json``)."""
    children = [child.pid for child in psutil.Process(pid).children(recursive=True)]
    redis_pid = json.loads((data_dir / "redis" / "server.json").read_text())["pid"]
    return tuple(dict.fromkeys([*children, int(redis_pid)]))


@contextlib.contextmanager
def ira_dev(tmp: Path, *, sampled: bool = False, timed_handles: bool = False) -> Iterator[Target]:
    """The whole ``ira dev`` (every role, embedded broker and Redis, SQLite), dev config with the
    edge's rate limits raised; stopped with SIGINT (its drain), killed if that hangs. ``sampled``:
    under ``bench/task_sampler.py`` (writes ``<tmp>/dev/task-samples.json`` on SIGUSR2);
    ``timed_handles``: under ``bench/handle_timer.py`` (``<tmp>/dev/handle-times.json``)."""
    home = tmp / "dev"
    home.mkdir()
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("IRA_", "OTEL_"))}
    env.update(IRA_CONFIG=str(ira_config(home, "store")), IRA_DATA_DIR=str(home / "data"), IRA_HTTP_PORT=str(port))
    url = f"http://127.0.0.1:{port}"
    command = [str(IRA), "dev"]
    if sampled or timed_handles:
        command = [sys.executable, "-m", "bench.task_sampler" if sampled else "bench.handle_timer", "dev"]
        env.update(BENCH_TASK_SAMPLES=str(home / "task-samples.json"),
                   BENCH_HANDLE_TIMES=str(home / "handle-times.json"),
                   PYTHONPATH=os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]))
    with (home / "dev.log").open("ab") as out:
        process = subprocess.Popen(command, env=env, cwd=home, stdout=out,  # noqa: S603
                                   stderr=subprocess.STDOUT, start_new_session=True)
    try:
        wait_ready(f"{url}/readyz", process, home / "dev.log", timeout=120)
        yield Target("ira_dev", f"{url}/v1/sources/alertmanager/am", "webhook", process.pid,
                     ("Content-Type: application/json", f"Authorization: Bearer {AM_TOKEN}"),
                     others=dev_tree(process.pid, home / "data"), pipeline=True, home=str(home))
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGINT)
        try:
            process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()


@dataclass(frozen=True)
class Load:
    duration: float
    connections: int
    ops: int | None = None
    rounds: int = 3
    scenarios: tuple[tuple[str, int, int], ...] = SCENARIOS
    drain_limit: float | None = None
    """--pipeline: how long to wait for triage to catch up after wrk (None: 5x the run, at least 30 s)."""
    sample_tasks: Path | None = None
    """--pipeline: where each run's task samples go (``<stem>-<scenario>-<round>.json``), or None."""

    @property
    def seconds(self) -> int:
        """wrk runs for a time, not a count: ``--ops N`` becomes about N requests at ~1,000/s."""
        return max(1, math.ceil(self.ops / 1000)) if self.ops else max(1, int(self.duration))


async def run_wrk(target: Target, load: Load, *, per_request: int, dup_percent: int) -> dict[str, float]:
    """One wrk run; returns wrk's JSON line (requests, latency percentiles in µs, errors)."""
    command = ["wrk", "-t", "1", "-c", str(load.connections), "-d", f"{load.seconds}s", "--timeout", "10s",
               "-s", str(LUA), *[arg for h in target.headers for arg in ("-H", h)], target.url,
               "--", target.format, str(per_request), str(dup_percent), uuid.uuid4().hex[:8]]
    process = await asyncio.create_subprocess_exec(*command, stdout=asyncio.subprocess.PIPE,
                                                   stderr=asyncio.subprocess.PIPE)
    out, err = await process.communicate()
    lines = [line for line in out.decode().splitlines() if line.startswith("{")]
    if process.returncode != 0 or not lines:
        raise RuntimeError(f"wrk failed ({process.returncode}): {err.decode()[-2000:]} {out.decode()[-2000:]}")
    return json.loads(lines[-1])


def ira_counts(target: Target) -> dict[str, float]:
    if not target.name.startswith("ira"):
        return {}
    text = httpx.get(target.url.split("/v1/")[0] + "/metrics", timeout=5).text
    return {name: float(value) for name, value in _METRIC.findall(text)}


async def measure(target: Target, load: Load, scenario: tuple[str, int, int]) -> dict[str, object]:
    name, per_request, dup_percent = scenario
    before_counts, load_before, cpu_before = ira_counts(target), os.getloadavg()[0], sum(cpu_of(target).values())
    result = await run_wrk(target, load, per_request=per_request, dup_percent=dup_percent)
    cpu = sum(cpu_of(target).values()) - cpu_before
    seconds, requests = result["duration_us"] / 1e6, result["requests"]
    record: dict[str, object] = {
        "bench": "ingest", "target": target.name, "scenario": name, "alerts_per_request": per_request,
        "duplicate_percent": dup_percent, "connections": load.connections, "requests": requests,
        "seconds": round(seconds, 2), "requests_per_s": round(requests / seconds, 1),
        "alerts_per_s": round(requests * per_request / seconds, 1), "p50_ms": result["p50_us"] / 1000,
        "p99_ms": result["p99_us"] / 1000, "non_2xx": result["non_2xx"], "socket_errors": result["socket_errors"],
        "server_cpu_ms_per_request": round(cpu * 1000 / max(requests, 1), 3),
        "load1_before": round(load_before, 2), "load1_after": round(os.getloadavg()[0], 2),
    }
    after = ira_counts(target)
    for metric, key in (("ira_source_events_accepted_total", "accepted"),
                        ("ira_source_events_duplicate_total", "duplicates")):
        if after:
            record[key] = after.get(metric, 0) - before_counts.get(metric, 0)
    return record


@dataclass(frozen=True)
class Counts:
    """ira's own counters at one moment: alerts the edge accepted, alerts triage handled."""

    accepted: float
    duplicates: float
    triaged: float
    triage_lag: float

    @classmethod
    def of(cls, target: Target) -> Counts:
        text = httpx.get(target.url.split("/v1/")[0] + "/metrics", timeout=10).text
        edge = {name: float(value) for name, value in _METRIC.findall(text)}
        return cls(accepted=edge.get("ira_source_events_accepted_total", 0.0),
                   duplicates=edge.get("ira_source_events_duplicate_total", 0.0),
                   triaged=sum(float(v) for v in _TRIAGED.findall(text)),
                   triage_lag=sum(float(v) for v in _TRIAGE_LAG.findall(text)))

    @property
    def backlog(self) -> float:
        """Alerts the edge accepted that triage has not handled yet (since ira dev started;
        triage's inbox duplicates of re-sent alerts can make it dip below 0: read as 0)."""
        return max(0.0, self.accepted - self.triaged)


async def sample_backlog(target: Target, samples: list[float], stop: asyncio.Event) -> None:
    """The backlog once a second while wrk runs (is it flat, or growing?)."""
    while not stop.is_set():
        with contextlib.suppress(httpx.HTTPError):
            samples.append((await asyncio.to_thread(Counts.of, target)).backlog)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), timeout=1.0)


async def caught_up(target: Target, *, within: float) -> tuple[float | None, Counts]:
    """Seconds until triage handled every alert the edge accepted (None: not ``within``)."""
    began = time.monotonic()
    while True:
        now = await asyncio.to_thread(Counts.of, target)
        if now.backlog <= 0:
            return round(time.monotonic() - began, 2), now
        if time.monotonic() - began > within:
            return None, now
        await asyncio.sleep(0.25)


def slope(samples: list[float]) -> float:
    """Least-squares slope per second of one-second samples (0 with fewer than 3)."""
    if len(samples) < 3:
        return 0.0
    xs = range(len(samples))
    mean_x, mean_y = statistics.fmean(xs), statistics.fmean(samples)
    top = sum((x - mean_x) * (y - mean_y) for x, y in zip(xs, samples, strict=True))
    return top / sum((x - mean_x) ** 2 for x in xs)


def per_alert_ms(cpu: dict[int, float], alerts: float) -> float | None:
    """None when no alert was served (a smoke run shorter than one 100-alert request)."""
    return round(sum(cpu.values()) * 1000 / alerts, 4) if alerts > 0 else None


async def measure_pipeline(target: Target, load: Load, scenario: tuple[str, int, int]) -> dict[str, object]:
    """One wrk run into the whole ira dev; then wait (bounded) until triage caught up."""
    name, per_request, dup_percent = scenario
    start, cpu_start, load_before = Counts.of(target), cpu_of(target), os.getloadavg()[0]
    samples: list[float] = []
    stop = asyncio.Event()
    sampler = asyncio.create_task(sample_backlog(target, samples, stop))
    if load.sample_tasks:
        os.kill(target.pid, signal.SIGUSR1)
    try:
        result = await run_wrk(target, load, per_request=per_request, dup_percent=dup_percent)
    finally:
        stop.set()
        await sampler
    cpu_window = {pid: cpu - cpu_start[pid] for pid, cpu in cpu_of(target).items()}
    end = Counts.of(target)
    limit = load.drain_limit if load.drain_limit is not None else max(30.0, load.seconds * 5)
    seconds_to_catch_up, drained = await caught_up(target, within=limit)
    cpu_drained = {pid: cpu - cpu_start[pid] for pid, cpu in cpu_of(target).items()}
    if load.sample_tasks:
        await task_samples(target, load.sample_tasks, name)
    seconds, requests = result["duration_us"] / 1e6, result["requests"]
    alerts = end.accepted - start.accepted + end.duplicates - start.duplicates  # alerts served, new or not
    return {
        "bench": "ingest", "pipeline": True, "target": target.name, "scenario": name,
        "alerts_per_request": per_request, "duplicate_percent": dup_percent, "connections": load.connections,
        "requests": requests, "seconds": round(seconds, 2), "alerts_per_s": round(requests * per_request / seconds, 1),
        "p50_ms": result["p50_us"] / 1000, "p99_ms": result["p99_us"] / 1000, "non_2xx": result["non_2xx"],
        "socket_errors": result["socket_errors"], "accepted": end.accepted - start.accepted,
        "duplicates": end.duplicates - start.duplicates,
        "cpu_ms_per_alert": per_alert_ms(cpu_window, alerts),
        "cpu_ms_per_alert_drained": per_alert_ms(cpu_drained, alerts),
        "cpu_ms_per_alert_by_process": {f"{process_name(pid)}[{pid}]": per_alert_ms({pid: cpu}, alerts)
                                        for pid, cpu in cpu_drained.items()},
        "cpu_cores_busy": round(sum(cpu_window.values()) / seconds, 2),
        "backlog_at_start": start.backlog, "backlog_max": max(samples, default=0.0), "backlog_at_end": end.backlog,
        "backlog_slope_per_s": round(slope(samples), 1), "caught_up_s": seconds_to_catch_up,
        "alerts_per_s_triaged": (round(requests * per_request / (seconds + seconds_to_catch_up), 1)
                                 if seconds_to_catch_up is not None else None),
        "triage_lag_at_end": end.triage_lag, "triage_lag_drained": drained.triage_lag,
        "load1_before": round(load_before, 2), "load1_after": round(os.getloadavg()[0], 2),
    }


async def task_samples(target: Target, path: Path, scenario: str) -> None:
    """Stop ``bench/task_sampler.py``'s sampling (wrk's window and the drain) and keep its file
    as ``<stem>-<scenario>-<n>.json``; a summary of the busiest tasks on stderr."""
    written = Path(target.home) / "task-samples.json"
    written.unlink(missing_ok=True)
    os.kill(target.pid, signal.SIGUSR2)
    for _ in range(100):
        if written.exists():
            break
        await asyncio.sleep(0.1)
    else:
        progress("task samples not written")
        return
    n = 1 + sum(1 for _ in path.parent.glob(f"{path.stem}-{scenario}-*.json"))
    kept = path.with_name(f"{path.stem}-{scenario}-{n}.json")
    shutil.move(written, kept)
    report = json.loads(kept.read_text())
    busy = sum(t["samples"] for t in report["tasks"] if t["task"] != "<idle>") or 1
    progress(f"task samples in {kept}: " + ", ".join(f"{t['task']} {100 * t['samples'] / busy:.0f}%"
                                                     for t in report["tasks"][:8] if t["task"] != "<idle>"))


async def measure_reference(target: Target, load: Load, scenario: tuple[str, int, int]) -> dict[str, object]:
    """A reference (Alertmanager) measured like ira dev, so the two lines compare key by key."""
    record = await measure(target, load, scenario)
    alerts = int(record["requests"]) * int(record["alerts_per_request"])  # type: ignore[call-overload]
    record["cpu_ms_per_alert"] = round(float(record["server_cpu_ms_per_request"]) * int(record["requests"])  # type: ignore[arg-type, call-overload]
                                       / max(alerts, 1), 4)
    record["alerts_per_s_triaged"] = record["alerts_per_s"]  # nothing of it comes later
    record["pipeline"] = True
    return record


def ratio(name: str, scenario: str, rounds: list[dict[str, dict[str, object]]], numerator: str, denominator: str,
          key: str = "alerts_per_s") -> None:
    """The median over rounds of the ratio within each round (targets of one round ran back to back)."""
    values = sorted(float(r[numerator][key]) / max(float(r[denominator][key]), 1e-9)  # type: ignore[arg-type]
                    for r in rounds if r[numerator][key] is not None and r[denominator][key] is not None)
    if not values:
        return
    emit({"bench": "ingest", "ratio": name, "scenario": scenario, "of": key,
          "value": round(statistics.median(values), 3), "min": round(values[0], 3), "max": round(values[-1], 3),
          "rounds": len(values)})


@contextlib.asynccontextmanager
async def embedded_stack(tmp: Path) -> AsyncIterator[tuple[str, str]]:
    """The broker and Redis ``ira dev`` would start: (bootstrap, redis url)."""
    broker = EmbeddedKafka(tmp / "kafka")
    await broker.start()
    redis = EmbeddedRedis(tmp)
    await asyncio.to_thread(redis.start)
    try:
        yield broker.bootstrap, redis.url
    finally:
        await asyncio.to_thread(redis.stop)
        await broker.stop()


async def run(load: Load, *, acks: list[str], untraced: bool) -> None:
    for tool in ("wrk", ALERTMANAGER):
        if shutil.which(tool) is None:
            raise SystemExit(f"bench/ingest.py needs {tool}")
    with tempfile.TemporaryDirectory(prefix="ira-bench-ingest-") as name:
        tmp = Path(name)
        async with embedded_stack(tmp) as (bootstrap, redis_url):
            with contextlib.ExitStack() as stack:
                ours = [stack.enter_context(ira_gateway(tmp / ack, bootstrap, redis_url, ack=ack)) for ack in acks]
                if untraced:
                    ours.append(stack.enter_context(ira_gateway(tmp / "untraced", bootstrap, redis_url,
                                                                ack=acks[0], traced=False)))
                raw = stack.enter_context(raw_chain(tmp, bootstrap, redis_url))
                am = stack.enter_context(alertmanager(tmp))
                progress(f"cores {os.cpu_count()}, load {os.getloadavg()}; warming up")
                warmup = Load(duration=1 if load.ops else 3, connections=load.connections)
                for target in (*ours, raw, am):
                    await run_wrk(target, warmup, per_request=1, dup_percent=0)
                await scenarios(load, tuple(ours), raw, am)


async def run_pipeline(load: Load, *, compare_alertmanager: bool) -> None:
    """``--pipeline``: the whole ira dev (and Alertmanager) under the same load, round by round."""
    needed = ("wrk", ALERTMANAGER) if compare_alertmanager else ("wrk",)
    for tool in needed:
        if shutil.which(tool) is None:
            raise SystemExit(f"bench/ingest.py needs {tool}")
    with tempfile.TemporaryDirectory(prefix="ira-bench-pipeline-") as name, contextlib.ExitStack() as stack:
        tmp = Path(name)
        targets = [stack.enter_context(ira_dev(tmp, sampled=load.sample_tasks is not None))]
        if compare_alertmanager:
            targets.append(stack.enter_context(alertmanager(tmp)))
        progress(f"cores {os.cpu_count()}, load {os.getloadavg()}; ira dev tree {targets[0].pids}; warming up")
        warmup = Load(duration=1 if load.ops else 3, connections=load.connections)
        for target in targets:
            await run_wrk(target, warmup, per_request=1, dup_percent=0)
        await caught_up(targets[0], within=60)
        for scenario in load.scenarios:
            rounds: list[dict[str, dict[str, object]]] = []
            for number in range(1, load.rounds + 1):
                progress(f"pipeline scenario {scenario[0]}, round {number} of {load.rounds}")
                results = {t.name: await (measure_pipeline if t.pipeline else measure_reference)(t, load, scenario)
                           for t in targets}
                for record in results.values():
                    emit({**record, "round": number})
                rounds.append(results)
            if compare_alertmanager:
                ratio("ira_dev/alertmanager", scenario[0], rounds, "ira_dev", "alertmanager")
                ratio("ira_dev/alertmanager", scenario[0], rounds, "ira_dev", "alertmanager", key="cpu_ms_per_alert")
                ratio("ira_dev/alertmanager", scenario[0], rounds, "ira_dev", "alertmanager",
                      key="alerts_per_s_triaged")


async def scenarios(load: Load, ours: tuple[Target, ...], raw: Target, am: Target) -> None:
    """Each scenario in ``load.rounds`` rounds; in a round every target runs back to back, so a
    ratio compares runs that shared the machine's mood (this machine's speed drifts by 20 %)."""
    for scenario in load.scenarios:
        targets = (ours[0], raw, *ours[1:], am) if scenario[0] == "single" else (*ours, am)
        rounds: list[dict[str, dict[str, object]]] = []
        for number in range(1, load.rounds + 1):
            progress(f"scenario {scenario[0]}, round {number} of {load.rounds}")
            results = {target.name: await measure(target, load, scenario) for target in targets}
            for record in results.values():
                emit({**record, "round": number})
            rounds.append(results)
        for target in ours:
            ratio(f"{target.name}/alertmanager", scenario[0], rounds, target.name, am.name)
            if scenario[0] == "single":
                ratio(f"{target.name}/raw_chain", scenario[0], rounds, target.name, raw.name, key="requests_per_s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--duration", type=float, default=6, help="seconds per run (default 6)")
    parser.add_argument("--rounds", type=int, default=3, help="rounds per scenario; ratios are their median")
    parser.add_argument("--connections", type=int, default=32, help="concurrent keep-alive connections")
    parser.add_argument("--ack", default="store,broker",
                        help="commit points to measure, comma-separated: store (target ira), broker (ira_broker)")
    parser.add_argument("--untraced", action="store_true", help="also the first --ack with tracing disabled")
    parser.add_argument("--pipeline", action="store_true",
                        help="the whole ira dev (every role) instead of the gateway alone; CPU of its process tree")
    parser.add_argument("--compare-alertmanager", action="store_true",
                        help="with --pipeline: also Debian's Alertmanager, same load, same rounds; ratio lines")
    parser.add_argument("--scenarios", default=",".join(s[0] for s in SCENARIOS),
                        help="which scenarios, comma-separated (default: all)")
    parser.add_argument("--drain-limit", type=float, default=None,
                        help="with --pipeline: seconds to wait for triage to catch up after each run (default: 5x "
                             "the run, at least 30); CPU per alert 'drained' counts until then")
    parser.add_argument("--ops", type=int, default=None,
                        help="smoke size: each run lasts about N/1000 s (wrk is time-boxed), overriding --duration")
    parser.add_argument("--sample-tasks", type=Path, metavar="FILE",
                        help="with --pipeline: sample ira dev's stacks per asyncio task during each run and its "
                             "drain (bench/task_sampler.py); FILE-<scenario>-<n>.json each")
    parser.add_argument("--set", action="append", default=[], metavar="SECTION.KEY=VALUE",
                        help="an ira setting (YAML value), e.g. runtime.relay_batch_size=500; repeatable")
    args = parser.parse_args()
    OVERRIDES.extend((item.split("=", 1)[0], yaml.safe_load(item.split("=", 1)[1])) for item in args.set)
    # SIGTERM (a time limit, Ctrl-C in another shell) must still run the cleanup below: the
    # embedded Redis daemonizes and would outlive us otherwise.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    rounds = 1 if args.ops else args.rounds
    chosen = {name.strip() for name in args.scenarios.split(",")}
    picked = tuple(s for s in SCENARIOS if s[0] in chosen)
    if args.pipeline:
        asyncio.run(run_pipeline(Load(duration=args.duration, connections=args.connections, ops=args.ops,
                                      rounds=rounds, scenarios=picked, drain_limit=args.drain_limit,
                                      sample_tasks=args.sample_tasks),
                                 compare_alertmanager=args.compare_alertmanager))
        return
    acks = [ack.strip() for ack in args.ack.split(",") if ack.strip()]
    if not acks or set(acks) - {"store", "broker"}:
        raise SystemExit("--ack takes store and/or broker")
    asyncio.run(run(Load(duration=args.duration, connections=args.connections, ops=args.ops, rounds=rounds,
                         scenarios=picked),
                    acks=acks, untraced=args.untraced))


if __name__ == "__main__":
    main()
