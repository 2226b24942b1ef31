"""A Platform built from Settings, as a worker builds it: its consumers and loops feed /metrics."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import nullcontext
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest_asyncio
from sqlalchemy.ext.asyncio import AsyncConnection

from ira.core.envelope import Envelope, Topic, topic_name
from ira.core.errors import DomainError
from ira.infra.tansu import EmbeddedKafka
from ira.runtime.bus.record import RecordMeta
from ira.runtime.doorbell import doorbell_channel
from ira.runtime.platform import Platform
from ira.runtime.settings import load_settings
from ira.runtime.stack import open_platform
from ira.runtime.store import runs, steps
from ira.runtime.store.migrate import upgrade
from ira.runtime.wiring import build_consumer, build_dispatcher, build_relay, ringing
from tests.contracts.test_store import new_run
from tests.eventually import eventually


@pytest_asyncio.fixture(loop_scope="session")
async def platform(private_kafka: EmbeddedKafka, redis_url: str, tmp_path: Path) -> AsyncIterator[Platform]:
    settings = load_settings({"IRA_DATABASE_URL": f"sqlite:///{tmp_path / 'ira.db'}", "IRA_REDIS_URL": redis_url,
                              "IRA_KAFKA_BOOTSTRAP": private_kafka.bootstrap, "IRA_DATA_DIR": str(tmp_path)})
    settings = settings.model_copy(update={"kafka": settings.kafka.model_copy(update={"partitions": 1})})
    async with open_platform(settings, embedded=False, say=lambda _m: None) as built:
        await upgrade(built.db)
        yield built


def metric(platform: Platform, name: str) -> float:
    for line in platform.metrics.render().decode().splitlines():
        if line.startswith(name) and not line.startswith("#"):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


async def test_the_relay_packs_the_alerts_topic_unless_the_config_says_not_to(platform: Platform) -> None:
    alerts = topic_name(Topic.ALERTS, platform.settings.environment)
    assert build_relay(platform).pack == {alerts}
    runtime = platform.settings.runtime.model_copy(update={"relay_pack_alerts": False})
    unpacked = replace(platform, settings=platform.settings.model_copy(update={"runtime": runtime}))
    assert build_relay(unpacked).pack == frozenset()


async def test_a_process_without_a_relay_rings_after_its_commits_and_a_relay_listens(platform: Platform) -> None:
    channel = doorbell_channel(platform.settings.environment)
    heard: list[bytes] = []
    pubsub = platform.redis.pubsub(ignore_subscribe_messages=True)
    await pubsub.subscribe(channel)

    async def collect() -> None:
        async for message in pubsub.listen():
            heard.append(message["data"])

    collecting = asyncio.create_task(collect())
    try:
        async def commit_a_wakeup() -> None:
            async with platform.db.transaction() as conn:
                await runs.create_run(conn, new_run(), at=datetime.now(UTC))  # its wake-up waits for a relay

        with ringing(platform, relays_here=False):
            await commit_a_wakeup()
        await eventually(lambda: heard == [b"1"])
        with ringing(platform, relays_here=True):  # this process's relay hears its commits itself
            await commit_a_wakeup()
        await eventually(lambda: not any(t.get_name() == "relay-doorbell" and not t.done()
                                         for t in asyncio.all_tasks()))  # any ring it rang is out
        await platform.redis.publish(channel, b"sentinel")  # so the sentinel comes behind it
        await eventually(lambda: b"sentinel" in heard)
        assert heard == [b"1", b"sentinel"]
    finally:
        collecting.cancel()
        await asyncio.gather(collecting, return_exceptions=True)
        await pubsub.aclose()
    assert build_relay(platform).bell is not None
    runtime = platform.settings.runtime.model_copy(update={"relay_doorbell": False})
    quiet = replace(platform, settings=platform.settings.model_copy(update={"runtime": runtime}))
    assert build_relay(quiet).bell is None
    assert isinstance(ringing(quiet, relays_here=False), nullcontext)


async def test_consumer_outcomes_relay_and_claims_show_on_metrics(platform: Platform) -> None:
    async def refuse_poison(conn: AsyncConnection, envelope: Envelope, meta: RecordMeta) -> None:
        if envelope.type == "poison":
            raise DomainError("not for us")

    consumer = build_consumer(platform, name="probe", topics=[Topic.INCIDENTS], handler=refuse_poison,
                              group_id="wiring-probe")
    relay = build_relay(platform)
    stop = asyncio.Event()
    tasks = [asyncio.create_task(consumer.run(stop)), asyncio.create_task(relay.run(stop))]
    try:
        for kind in ("ok", "poison"):
            env = Envelope(message_id=kind, type=kind, tenant_id="acme", occurred_at=datetime.now(UTC))
            await platform.producer.publish(topic_name(Topic.INCIDENTS, "prod"), "acme:x", env)
        async with platform.db.transaction() as conn:
            await runs.create_run(conn, new_run(), at=datetime.now(UTC))  # its wake-up goes through the relay
        await eventually(lambda: metric(platform, 'ira_dlq_messages_total{consumer="probe"') == 1, timeout=20)
        await eventually(lambda: metric(platform, "ira_relay_published_total") >= 1, timeout=20)
        assert metric(platform, 'ira_messages_handled_total{consumer="probe"}') == 1
        # the dead letter is kept in the store: the DLQ's size, next to nothing parked
        await eventually(lambda: metric(platform, 'ira_dead_letters{consumer="probe"}') == 1, timeout=20)
        assert 'ira_parked_messages{consumer="probe"} 0.0' in platform.metrics.render().decode()
        assert 'ira_consumer_lag_messages{consumer="probe"' in platform.metrics.render().decode()
        # idle now: the lag gauge goes back to 0 once the last records are committed
        await eventually(lambda: consumer.stats.committed and all(v == 0 for v in consumer.lag().values())
                         and metric(platform, 'ira_consumer_lag_messages{consumer="probe"') == 0, timeout=20)
    finally:
        stop.set()
        await asyncio.wait_for(asyncio.gather(*tasks), timeout=20)

    dispatcher = build_dispatcher(platform, "probe", {"metrics": lambda ctx: asyncio.sleep(0)})
    async with platform.db.transaction() as conn:
        run, _ = await runs.create_run(conn, new_run(), at=datetime.now(UTC))
    wake = Envelope(message_id="w", type="step.ready", tenant_id="acme", occurred_at=datetime.now(UTC),
                    payload={"run_id": run.run_id, "step_id": "metrics", "kind": "metrics"})
    await dispatcher.handle_wakeup(wake)  # won; the handler leaves it unfinished, so it is released
    async with platform.db.transaction() as conn:
        await steps.claim_step(conn, "acme", run.run_id, "metrics", owner="other", lease=timedelta(minutes=5),
                               now=datetime.now(UTC))
    await dispatcher.handle_wakeup(wake)  # lost: "other" holds it
    assert metric(platform, 'ira_step_claims_total{result="won"}') == 1
    assert metric(platform, 'ira_step_claims_total{result="lost"}') == 1
