"""Benchmark: CPU per alert of triage's faust noise worker (a real child process, embedded broker).

Every alert the webhook accepts is counted by the noise worker too (``ira.triage.noise_app``):
re-keyed by group (one record per group and hop per fetch) and tallied in windows kept in the
agent. So its CPU per alert, and the broker's, are part of what an alert costs the whole
pipeline (``bench/ingest.py --pipeline`` shows them beside the rest); this measures them alone.

Starts the embedded Tansu broker and Redis, the noise worker as triage starts it, publishes
``--alerts`` distinct firing alerts into ``--groups`` groups (the webhook's envelopes, keyed as
the sources role keys them), and waits until the worker has tallied all of them (its running
totals in Redis). Prints one JSON line per round: alerts/s, CPU ms per alert of the worker and
of the broker, and the records the worker produced per alert.

Usage: python bench/noise.py [--alerts 3000] [--groups 10] [--rounds 2] [--together 100] [--ops N]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path

from redis.asyncio import Redis

from ira.core.alert import ALERT_MESSAGE, AlertEvent, AlertStatus, Severity, SourceKind
from ira.core.envelope import Envelope, Topic, topic_name
from ira.infra.redis_server import EmbeddedRedis
from ira.infra.tansu import EmbeddedKafka
from ira.runtime.bus.admin import ensure_topics
from ira.runtime.bus.producer import BusProducer
from ira.runtime.settings.triage import TriageSettings
from ira.triage.noise import tally_key
from ira.triage.noise_app import NoiseWorkerConfig
from ira.triage.noise_process import NoiseWorkerProcess

ENV = "noisebench"
PARTITIONS = 3
PREFIX = "bench:"


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def alert(group: int, fingerprint: str) -> AlertEvent:
    now = datetime.now(UTC)
    return AlertEvent(event_id=str(uuid.uuid4()), tenant_id="demo", source_id="am",
                      source_kind=SourceKind.ALERTMANAGER, source_event_id=uuid.uuid4().hex, fingerprint=fingerprint,
                      status=AlertStatus.FIRING, name=f"Noise{group}", severity=Severity.WARNING,
                      labels={"alertname": f"Noise{group}", "service": "bench", "instance": fingerprint},
                      annotations={"summary": "bench"}, starts_at=now, received_at=now, service="bench")


async def tallied(redis: Redis) -> tuple[int, int]:
    """Alerts the worker has counted and the re-keyed records it read to count them (its running
    totals in Redis, written after each batch it tallied). The worker writes no other records
    (no changelogs), so ``records`` is all it produced: counted in the code, not from Tansu's end
    offsets, which are wrong for batched produces."""
    totals = await redis.hgetall(tally_key(PREFIX))
    return int(totals.get(b"alerts", 0)), int(totals.get(b"records", 0))


async def wait_tallied(redis: Redis, count: int, *, within: float) -> float | None:
    began = time.monotonic()
    while time.monotonic() - began < within:
        if (await tallied(redis))[0] >= count:
            return time.monotonic() - began
        await asyncio.sleep(0.25)
    return None


async def publish(producer: BusProducer, alerts: int, groups: int, together: int = 100) -> None:
    """``together`` alerts at a time, each time waiting for the broker's acks (1: one alert after another)."""
    topic = topic_name(Topic.ALERTS, ENV)
    for start in range(0, alerts, together):
        events = [alert(i % groups, uuid.uuid4().hex[:16]) for i in range(start, min(alerts, start + together))]
        await asyncio.gather(*(producer.publish(topic, f"{e.tenant_id}:{e.fingerprint}", Envelope(
            message_id=e.event_id, type=ALERT_MESSAGE, tenant_id=e.tenant_id, occurred_at=e.received_at,
            payload=e.model_dump(mode="json"))) for e in events))


@contextlib.asynccontextmanager
async def stack(tmp: Path) -> AsyncIterator[tuple[str, str]]:
    broker = EmbeddedKafka(tmp / "kafka")
    await broker.start()
    redis = EmbeddedRedis(tmp)
    await asyncio.to_thread(redis.start)
    try:
        await ensure_topics(broker.bootstrap, ENV, partitions=PARTITIONS)
        yield broker.bootstrap, redis.url
    finally:
        await asyncio.to_thread(redis.stop)
        await broker.stop()


async def run(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory(prefix="ira-bench-noise-") as name:
        tmp = Path(name)
        async with stack(tmp) as (bootstrap, redis_url):
            broker_pid = next(p for p in _children() if p != os.getpid())
            app_id = f"noise-{uuid.uuid4().hex[:8]}"
            config = NoiseWorkerConfig(bootstrap=bootstrap, source_topic=topic_name(Topic.ALERTS, ENV), app_id=app_id,
                                       partitions=PARTITIONS, data_dir=str(tmp / "noise"), redis_url=redis_url,
                                       key_prefix=PREFIX, triage=TriageSettings().model_dump(mode="json"))
            worker = NoiseWorkerProcess(config, log_path=tmp / "noise.log")
            stop = asyncio.Event()
            supervised = asyncio.create_task(worker.run(stop))
            producer = BusProducer(bootstrap)
            await producer.start()
            redis = Redis.from_url(redis_url)
            try:
                await publish(producer, 1, 1)
                if await wait_tallied(redis, 1, within=120) is None:
                    raise SystemExit(f"the noise worker never tallied; see {tmp / 'noise.log'}")
                done = 1
                for number in range(1, args.rounds + 1):
                    done = await one_round(args, number, producer, redis,
                                           pids={"noise_worker": worker.pid or 0, "broker": broker_pid}, done=done)
            finally:
                await redis.aclose()
                await producer.stop()
                stop.set()
                await asyncio.wait_for(supervised, 30)


async def one_round(args: argparse.Namespace, number: int, producer: BusProducer, redis: Redis, *,
                    pids: dict[str, int], done: int) -> int:
    before = {name: cpu_seconds(pid) for name, pid in pids.items()}
    _, written = await tallied(redis)
    began = time.monotonic()
    await publish(producer, args.alerts, args.groups, args.together)
    waited = await wait_tallied(redis, done + args.alerts, within=300)
    seconds = time.monotonic() - began
    cpu = {name: cpu_seconds(pid) - before[name] for name, pid in pids.items()}
    written = (await tallied(redis))[1] - written
    print(json.dumps({"bench": "noise", "round": number, "alerts": args.alerts, "groups": args.groups,
                      "together": args.together,
                      "tallied": waited is not None, "seconds": round(seconds, 2),
                      "alerts_per_s": round(args.alerts / seconds, 1),
                      "records_produced_per_alert": round(written / args.alerts, 2),
                      **{f"{name}_cpu_ms_per_alert": round(value * 1000 / args.alerts, 4)
                         for name, value in cpu.items()},
                      "load1": round(os.getloadavg()[0], 2)}), flush=True)
    return done + args.alerts


def _children() -> list[int]:
    import psutil

    return [child.pid for child in psutil.Process().children()]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--alerts", type=int, default=3000)
    parser.add_argument("--groups", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--together", type=int, default=100, help="alerts published at a time (1: single alerts)")
    parser.add_argument("--ops", type=int, help="smoke run: this many alerts, one round")
    args = parser.parse_args()
    # SIGTERM (a time limit) must still run the cleanup: the embedded Redis daemonizes.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    if args.ops is not None:
        args.alerts, args.rounds = args.ops, 1
    asyncio.run(run(args))


if __name__ == "__main__":
    sys.exit(main())
