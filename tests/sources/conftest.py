"""Fixtures of the sources tests: a real producer, a real Redis client, the app around them."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import timedelta

import pytest
from redis.asyncio import Redis

from ira.core.clock import SystemClock
from ira.infra.tansu import EmbeddedKafka
from ira.runtime.bus.producer import BusProducer
from ira.runtime.stack import redis_client
from tests.sources.harness import Harness, harness


@pytest.fixture
async def producer(kafka: EmbeddedKafka) -> AsyncIterator[BusProducer]:
    async with BusProducer(kafka.bootstrap, request_timeout=timedelta(seconds=2)) as bus_producer:
        yield bus_producer


@pytest.fixture
async def redis(redis_url: str) -> AsyncIterator[Redis]:
    client = redis_client(redis_url)  # the platform's own kind of client (a blocking pool)
    yield client
    await client.aclose()


@pytest.fixture
def edge(bus_env: str, redis: Redis, producer: BusProducer, redis_prefix: str) -> Harness:
    """The ingest app on this test's topic and Redis prefix, with the wall clock."""
    return harness(environment=bus_env, redis=redis, publisher=producer, clock=SystemClock(), redis_prefix=redis_prefix)
