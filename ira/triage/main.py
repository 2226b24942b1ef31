"""The ``triage`` role: the composition root of the package.

``run`` consumes ``ira.alerts.v1`` (consumer ``triage``, group ``ira-triage``, inbox mode,
``triage.batch_size`` events per transaction), closes incidents whose quiet period passed,
sends the incident updates that became due (:mod:`ira.triage.sweep`), triages the urgent alerts a
gateway of the same process commits right after that commit (:func:`eager_alerts`), and — with
``triage.noise.enabled`` — supervises the faust noise worker child process.
Its incidents are read through ``ira.readmodel`` (served by the dashboard role).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from datetime import timedelta
from typing import TYPE_CHECKING

from ira.core.alert import ALERTS_INBOX
from ira.core.commit import OutboxMessage
from ira.core.envelope import PRODUCTION, Topic, topic_name
from ira.runtime.bus.consumer import ConsumerRunner
from ira.runtime.bus.eager import EagerInbox
from ira.runtime.store import outbox
from ira.runtime.store.database import Database
from ira.runtime.wiring import build_consumer
from ira.triage.noise import NoiseState, NoNoiseState, RedisNoiseState
from ira.triage.sweep import sweep_updates
from ira.triage.worker import TriageHandler, close_quiet_incidents

if TYPE_CHECKING:
    from fastapi import APIRouter

    from ira.runtime.platform import Platform
    from ira.triage.noise_process import NoiseWorkerProcess

CONSUMER = ALERTS_INBOX


def scoped(name: str, environment: str) -> str:
    """Consumer groups and Redis prefixes per environment, like topic names."""
    return name if environment == PRODUCTION else f"{environment}.{name}"


def redis_prefix(environment: str) -> str:
    return f"ira:{environment}:"


def noise_state(platform: Platform) -> NoiseState:
    if not platform.settings.triage.noise.enabled:
        return NoNoiseState()
    return RedisNoiseState(platform.redis, prefix=redis_prefix(platform.settings.environment))


def build_handler(platform: Platform) -> TriageHandler:
    settings = platform.settings
    return TriageHandler(settings=settings.triage, environment=settings.environment, clock=platform.clock,
                         noise=noise_state(platform))


def build_noise_process(platform: Platform, *, redis_url: str) -> NoiseWorkerProcess:
    """The faust child for this platform (its data and log under the data dir)."""
    from ira.triage.noise_app import NoiseWorkerConfig
    from ira.triage.noise_process import NoiseWorkerProcess

    settings = platform.settings
    data_dir = settings.data_dir.resolve() / "triage-noise"
    config = NoiseWorkerConfig(
        bootstrap=platform.kafka_bootstrap, source_topic=topic_name(Topic.ALERTS, settings.environment),
        app_id=scoped("ira-triage-noise", settings.environment), partitions=settings.kafka.partitions,
        data_dir=str(data_dir), redis_url=redis_url, key_prefix=redis_prefix(settings.environment),
        triage=settings.triage.model_dump(mode="json"), log_level=settings.log_level.lower())
    return NoiseWorkerProcess(config, log_path=settings.data_dir.resolve() / "logs" / "triage-noise.log")


def _redis_url(platform: Platform) -> str:
    """The URL the platform's Redis client was built from (the embedded server's socket in ``ira dev``)."""
    if platform.settings.redis_url:
        return platform.settings.redis_url
    kwargs = platform.redis.connection_pool.connection_kwargs
    return f"unix://{kwargs['path']}?db={kwargs.get('db', 0)}"


def eager_alerts(runner: ConsumerRunner, db: Database, *, environment: str) -> EagerInbox:
    """The urgent alerts (a new group's first, :mod:`ira.sources.urgent`) a gateway of this
    process commits, triaged right after its commit instead of after the relay and the broker,
    unless an older alert of the same key may still be on its way (per-key order)."""
    topic = topic_name(Topic.ALERTS, environment)

    async def older_on_its_way(message: OutboxMessage) -> bool:
        async with db.reader() as conn:
            return await outbox.has_older_pending(conn, message, consumer=CONSUMER)

    return EagerInbox(runner, wants=lambda m: m.urgent and m.topic == topic, guard=older_on_its_way)


class TriageRole:
    """``ira worker --role triage``."""

    name = "triage"

    def routers(self, platform: Platform) -> Sequence[APIRouter]:
        return []

    async def run(self, platform: Platform, stop: asyncio.Event) -> None:
        settings = platform.settings
        handler = build_handler(platform)
        runner = build_consumer(platform, name=CONSUMER, topics=[Topic.ALERTS], handler=handler,
                                group_id=scoped("ira-triage", settings.environment),
                                batch_size=settings.triage.batch_size, batch_hooks=handler)
        eager = eager_alerts(runner, platform.db, environment=settings.environment)
        try:
            with eager.listening(platform.db):
                async with asyncio.TaskGroup() as tasks:
                    tasks.create_task(runner.run(stop), name="triage-consumer")
                    tasks.create_task(close_quiet_incidents(platform.db, platform.clock, settings=settings.triage,
                                                            stop=stop), name="triage-close")
                    tasks.create_task(sweep_updates(platform.db, platform.clock,
                                                    interval=settings.triage.update_interval,
                                                    environment=settings.environment, stop=stop),
                                      name="triage-updates")
                    if settings.triage.noise.enabled:
                        noise = build_noise_process(platform, redis_url=_redis_url(platform))
                        tasks.create_task(noise.run(stop), name="triage-noise")
        finally:
            await eager.drain(timedelta(seconds=5))


role = TriageRole()
