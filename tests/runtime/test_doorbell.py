"""The relay's doorbell on a real Redis: another process's commit wakes a resting relay at once.

Two ``Database`` handles on one database stand for two processes: the relay's and a role's
without a relay (as triage's child in ``ira dev``, or any role of the scale-out deployment).
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from functools import partial
from pathlib import Path

import pytest
from redis.asyncio import Redis

from ira.core.clock import SystemClock
from ira.core.commit import OutboxMessage
from ira.core.envelope import Envelope
from ira.runtime.doorbell import Doorbell, doorbell_channel, listen
from ira.runtime.relay import OutboxRelay
from ira.runtime.store import outbox
from ira.runtime.store.database import Database
from tests.eventually import eventually
from tests.runtime.test_intake import RecordingPublisher
from tests.store_fixtures import _drop_schema, open_database, postgres_test_url


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
async def two_processes(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[tuple[Database, Database]]:
    """(the relay's handle, another process's handle) on one migrated database."""
    relays, schema = await open_database(request.param, tmp_path)
    other = (Database.create(f"sqlite:///{tmp_path / 'ira.db'}") if schema is None
             else Database.create(postgres_test_url(), schema=schema))
    try:
        yield relays, other
    finally:
        await other.close()
        await relays.close()
        if schema:
            await _drop_schema(postgres_test_url(), schema)


@pytest.fixture
async def redis(redis_url: str) -> AsyncIterator[Redis]:
    client = Redis.from_url(redis_url)
    yield client
    await client.aclose()


def message(key: str) -> OutboxMessage:
    env = Envelope(message_id=uuid.uuid4().hex, type="step.ready", tenant_id="acme", occurred_at=datetime.now(UTC))
    return OutboxMessage(topic="ira.steps.v1", key=key, envelope=env)


async def subscribers(redis: Redis, channel: str) -> int:
    return int(dict(await redis.pubsub_numsub(channel))[channel.encode()])


async def test_a_commit_of_a_process_without_a_relay_wakes_a_resting_relay_at_once(
    two_processes: tuple[Database, Database], redis: Redis
) -> None:
    relays, other = two_processes
    channel = doorbell_channel(f"t{uuid.uuid4().hex[:8]}")
    published = RecordingPublisher()
    relay = OutboxRelay(db=relays, publisher=published, clock=SystemClock(),  # type: ignore[arg-type]
                        poll_interval=timedelta(seconds=60), bell=partial(listen, redis, channel))
    bell = Doorbell(redis, channel)
    stop = asyncio.Event()
    running = asyncio.create_task(relay.run(stop))
    try:
        # resting: its first pass found nothing, and it hears the channel
        await eventually(lambda: not relay.found, timeout=10)
        await eventually(lambda: subscribers(redis, channel), timeout=10)
        with other.waking_relay(bell.ring):
            async with other.transaction() as conn:
                await outbox.enqueue(conn, [message("acme:run-1")], at=datetime.now(UTC))
        # within its 60 s poll only if the ring woke it
        await eventually(lambda: [r.key for r in published.records] == ["acme:run-1"], timeout=10)
        assert bell.rung == 1
    finally:
        stop.set()
        await asyncio.wait_for(running, 10)
    assert await subscribers(redis, channel) == 0  # the relay stopped listening with its end


async def test_a_burst_of_rings_is_published_once_not_once_each(redis: Redis) -> None:
    channel = doorbell_channel(f"t{uuid.uuid4().hex[:8]}")
    heard: list[None] = []
    listening = asyncio.create_task(listen(redis, channel, lambda: heard.append(None)))
    try:
        await eventually(lambda: subscribers(redis, channel), timeout=10)
        bell = Doorbell(redis, channel)
        for _ in range(50):  # commits in a row: the publish that follows covers them all
            bell.ring()
        await eventually(lambda: bell.rung == 1 and len(heard) == 1, timeout=10)
        bell.ring()  # a later commit rings again
        await eventually(lambda: bell.rung == 2 and len(heard) == 2, timeout=10)
    finally:
        listening.cancel()
        await asyncio.gather(listening, return_exceptions=True)


async def test_a_bell_that_cannot_reach_redis_is_only_a_missed_hint() -> None:
    unreachable = Redis(host="127.0.0.1", port=1, socket_connect_timeout=0.5)
    bell = Doorbell(unreachable, doorbell_channel("prod"))
    try:
        bell.ring()
        bell.ring()
        await eventually(lambda: bell._ringing is None, timeout=10)  # gave up quietly, nothing raised
        assert bell.rung == 0
    finally:
        await unreachable.aclose()
