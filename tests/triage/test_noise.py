"""Noise control with the faust worker (a real child process) on the embedded broker.

The windows run on event time (``received_at``), so these events carry the real current time:
a verdict is written only while it still matters (``until`` in the future).
"""

from __future__ import annotations

import asyncio
import os
import signal
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from redis.asyncio import Redis

from ira.core.alert import AlertEvent
from ira.core.clock import FrozenClock
from ira.core.envelope import Topic, topic_name
from ira.infra.tansu import EmbeddedKafka
from ira.runtime.bus.producer import BusProducer
from ira.runtime.settings.triage import NoiseSettings, TriageSettings
from ira.runtime.store.database import Database
from ira.triage.noise import RedisNoiseState, tally_key, verdict_key
from ira.triage.noise_app import NoiseWorkerConfig
from ira.triage.noise_process import NoiseWorkerProcess
from ira.triage.noise_rebuild import rebuild_key
from tests.eventually import eventually
from tests.kafka_fixtures import TEST_PARTITIONS
from tests.triage.builders import alert, resolved
from tests.triage.harness import evaluations, handler, published
from tests.triage.kafka_harness import publish, running, triage_consumer

SETTINGS = TriageSettings(noise=NoiseSettings(window=timedelta(seconds=60), hop=timedelta(seconds=10),
                                              flapping_transitions=6), cooldown=timedelta(minutes=30))
pytestmark = pytest.mark.slow


@pytest.fixture
async def redis(redis_url: str) -> AsyncIterator[Redis]:
    client = Redis.from_url(redis_url)
    yield client
    await client.aclose()


def noise_worker(kafka: EmbeddedKafka, bus_env: str, *, tmp_path: Path, redis_url: str, prefix: str,
                 app_id: str) -> NoiseWorkerProcess:
    config = NoiseWorkerConfig(
        bootstrap=kafka.bootstrap, source_topic=topic_name(Topic.ALERTS, bus_env), app_id=app_id,
        partitions=TEST_PARTITIONS, data_dir=str(tmp_path / "noise"), redis_url=redis_url, key_prefix=prefix,
        triage=SETTINGS.model_dump(mode="json"))
    return NoiseWorkerProcess(config, log_path=tmp_path / "noise.log", stop_timeout=timedelta(seconds=5))


def cycles(start: datetime, first: int, last: int) -> list[AlertEvent]:
    """Fire/resolve cycles ``first..last-1`` of one alert, three seconds apart."""
    events = []
    for i in range(first, last):
        at = start + timedelta(seconds=6 * i)
        events += [alert(at=at, source_event_id=f"f{i}"), resolved(at=at + timedelta(seconds=3),
                                                                   source_event_id=f"r{i}")]
    return events


def is_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


async def test_a_flapping_alert_yields_one_run_and_flapping_decisions(
    kafka: EmbeddedKafka, bus_env: str, producer: BusProducer, sqlite_db: Database, redis: Redis,
    redis_url: str, redis_prefix: str, tmp_path: Path,
) -> None:
    now = datetime.now(UTC)
    triage = handler(FrozenClock(now), SETTINGS, RedisNoiseState(redis, prefix=redis_prefix), environment=bus_env)
    app_id = f"noise-{uuid.uuid4().hex[:8]}"
    worker = noise_worker(kafka, bus_env, tmp_path=tmp_path, redis_url=redis_url, prefix=redis_prefix, app_id=app_id)
    consumer = triage_consumer(kafka, bus_env, producer=producer, db=sqlite_db, handler=triage)
    stop = asyncio.Event()
    supervised = asyncio.create_task(worker.run(stop))
    try:
        async with running(consumer):
            await publish(producer, bus_env, cycles(now, 0, 4))  # 7 transitions: over the threshold of 6
            opened = await eventually(lambda: _first_evaluation(sqlite_db), timeout=20)
            key = verdict_key(redis_prefix, "acme", opened["basis"]["group_key"])
            await eventually(lambda: redis.exists(key), timeout=60, message=f"no verdict; see {tmp_path}/noise.log")
            await publish(producer, bus_env, cycles(now, 4, 10))  # ten cycles within a minute in all
            await eventually(lambda: consumer.stats.processed == 20, timeout=20)
    finally:
        stop.set()
        await asyncio.wait_for(supervised, 30)

    reasons = [e["reason"] for e in await evaluations(sqlite_db)]
    assert [d.decision for d in await published(sqlite_db)] == ["create_run"]  # one run
    assert reasons.count("new_incident") == 1 and reasons.count("flapping") >= 6
    assert worker.pid is not None and not is_alive(worker.pid)  # no orphan


async def _first_evaluation(db: Database) -> dict | None:
    found = await evaluations(db)
    return found[0] if found else None


async def test_the_noise_state_is_rebuilt_after_a_restart(
    kafka: EmbeddedKafka, bus_env: str, producer: BusProducer, redis: Redis, redis_url: str, redis_prefix: str,
    tmp_path: Path,
) -> None:
    now, app_id = datetime.now(UTC), f"noise-{uuid.uuid4().hex[:8]}"
    key = verdict_key(redis_prefix, "acme", '{alertname="HighErrorRate",environment="prod",service="checkout"}')
    first = noise_worker(kafka, bus_env, tmp_path=tmp_path, redis_url=redis_url, prefix=redis_prefix, app_id=app_id)
    async with running(first):
        await publish(producer, bus_env, [alert(fingerprint="fp-old", at=now - timedelta(minutes=10))])
        await eventually(lambda: tallied(redis, redis_prefix, 1), timeout=60, message="first worker started")
        await publish(producer, bus_env, cycles(now, 0, 3))  # 5 transitions: one short of flapping
        await eventually(lambda: tallied(redis, redis_prefix, 7), timeout=60, message="first worker tallied")
    assert not await redis.exists(key)
    # the old alert's record (first on the group's partition) is out of every window: not read again
    assert max(int(o) for o in (await redis.hgetall(rebuild_key(redis_prefix, app_id))).values()) >= 1

    second = noise_worker(kafka, bus_env, tmp_path=tmp_path, redis_url=redis_url, prefix=redis_prefix, app_id=app_id)
    async with running(second):
        # one more transition makes six only if the windows and the last states came back
        await publish(producer, bus_env, [alert(at=now + timedelta(seconds=18), source_event_id="f3")])
        verdict = await eventually(lambda: redis.get(key), timeout=90, message="verdict after restart")

    assert b'"kind":"flapping"' in verdict and b'"transitions":6' in verdict
    assert first.pid != second.pid and not is_alive(second.pid or 0)


async def tallied(redis: Redis, prefix: str, expected: int) -> bool:
    """True once the faust app counted ``expected`` alerts (its running total in Redis)."""
    return int(await redis.hget(tally_key(prefix), "alerts") or 0) >= expected


async def test_a_dead_noise_worker_is_restarted_and_none_outlives_its_supervisor(
    kafka: EmbeddedKafka, bus_env: str, redis_url: str, redis_prefix: str, tmp_path: Path,
) -> None:
    worker = noise_worker(kafka, bus_env, tmp_path=tmp_path, redis_url=redis_url, prefix=redis_prefix,
                          app_id=f"noise-{uuid.uuid4().hex[:8]}")
    stop = asyncio.Event()
    supervised = asyncio.create_task(worker.run(stop))
    try:
        first = await eventually(lambda: worker.pid, timeout=10)
        os.kill(first, signal.SIGKILL)
        second = await eventually(lambda: worker.pid if worker.starts == 2 else None, timeout=20)
    finally:
        stop.set()
        await asyncio.wait_for(supervised, 30)

    assert first != second
    assert not is_alive(first) and not is_alive(second)
