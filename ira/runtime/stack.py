"""Assemble a Platform from Settings: the one place that connects to anything.

``open_platform`` yields ready clients and closes them in reverse order on exit. With
``embedded=True`` (``ira dev``) it starts what is not configured: the Tansu broker when
``kafka_bootstrap`` is unset and a Redis server when ``redis_url`` is unset (each with a
watchdog that starts it again if it dies while ira runs), and it brings the database schema
up to date. Workers (``embedded=False``) need every service configured.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable, Coroutine
from contextlib import AsyncExitStack, asynccontextmanager
from datetime import timedelta
from typing import Any

from redis.asyncio import BlockingConnectionPool, Redis

from ira.core.clock import SystemClock
from ira.core.errors import ConfigError
from ira.runtime.bus.admin import ensure_topics
from ira.runtime.bus.producer import BusProducer
from ira.runtime.platform import Platform
from ira.runtime.settings import Settings
from ira.runtime.store.database import Database
from ira.runtime.store.migrate import upgrade
from ira.runtime.telemetry import Metrics

log = logging.getLogger(__name__)

Say = Callable[[str], None]

REDIS_MAX_CONNECTIONS = 200
REDIS_POOL_TIMEOUT = timedelta(seconds=5)


def redis_client(url: str) -> Redis:
    """The process's Redis client, on a *blocking* pool: a burst of concurrent requests waits
    (up to 5 s) for one of its connections instead of failing from the 101st on, as redis-py's
    default pool does ("Too many connections": a 503 for every webhook past the 100th)."""
    pool = BlockingConnectionPool.from_url(url, max_connections=REDIS_MAX_CONNECTIONS,
                                           timeout=REDIS_POOL_TIMEOUT.total_seconds())
    return Redis.from_pool(pool)


async def _kafka(stack: AsyncExitStack, settings: Settings, *, embedded: bool, say: Say) -> str:
    if settings.kafka_bootstrap:
        return settings.kafka_bootstrap
    if not embedded:
        raise ConfigError("kafka_bootstrap", "required for a worker (set IRA_KAFKA_BOOTSTRAP)")
    from ira.infra.tansu import EmbeddedKafka  # the dev launcher lives with the infrastructure

    broker = EmbeddedKafka(settings.data_dir.resolve() / "logs")
    await broker.start()
    stack.push_async_callback(broker.stop)
    _beside(stack, broker.keep_alive(), name="embedded-kafka-watchdog")
    say(f"kafka     embedded Tansu broker on {broker.bootstrap} (memory storage; log {broker.log_path})")
    return broker.bootstrap


async def _redis_url(stack: AsyncExitStack, settings: Settings, *, embedded: bool, say: Say) -> str:
    if settings.redis_url:
        return settings.redis_url
    if not embedded:
        raise ConfigError("redis_url", "required for a worker (set IRA_REDIS_URL)")
    from ira.infra.redis_server import EmbeddedRedis

    server = EmbeddedRedis(settings.data_dir.resolve())  # redis-server runs in another cwd
    await asyncio.to_thread(server.start)
    stack.push_async_callback(asyncio.to_thread, server.stop)
    _beside(stack, server.keep_alive(), name="embedded-redis-watchdog")
    say(f"redis     embedded Redis at {server.url}")
    return server.url


def _beside(stack: AsyncExitStack, work: Coroutine[Any, Any, None], *, name: str) -> None:
    """Run ``work`` (a watchdog) until the stack closes; it is cancelled before what it watches
    is stopped, so a clean stop is never mistaken for a death."""
    task = asyncio.create_task(work, name=name)

    async def cancel() -> None:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)

    stack.push_async_callback(cancel)


async def _database(stack: AsyncExitStack, settings: Settings, *, embedded: bool, say: Say) -> Database:
    db = Database.create(settings.database_url)
    stack.push_async_callback(db.close)
    if embedded:
        await upgrade(db)
    say(f"database  {db.engine.url.render_as_string(hide_password=True)}")
    return db


@asynccontextmanager
async def open_platform(settings: Settings, *, embedded: bool, say: Say = log.info) -> AsyncIterator[Platform]:
    """Start or connect to every dependency; close them all (reverse order) on exit."""
    async with AsyncExitStack() as stack:
        bootstrap = await _kafka(stack, settings, embedded=embedded, say=say)
        redis_url = await _redis_url(stack, settings, embedded=embedded, say=say)
        db = await _database(stack, settings, embedded=embedded, say=say)
        await ensure_topics(bootstrap, settings.environment, partitions=settings.kafka.partitions,
                            replication=settings.kafka.replication_factor)
        producer = BusProducer(bootstrap, enable_idempotence=settings.kafka.enable_idempotence)
        await producer.start()
        stack.push_async_callback(producer.stop)
        redis = redis_client(redis_url)
        stack.push_async_callback(redis.aclose)
        yield Platform(settings=settings, db=db, producer=producer, redis=redis, clock=SystemClock(),
                       metrics=Metrics(), kafka_bootstrap=bootstrap, redis_url=redis_url)
