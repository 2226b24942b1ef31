"""The sources role: the webhook edge. Composition root: builds the use-case from the Platform.

It has HTTP routes and no background loop: ``run`` only waits for the stop signal, so
``ira worker --role sources`` is a valid (idle) process while ``ira worker --role gateway``
serves the routes.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from prometheus_client import CollectorRegistry
from redis.asyncio import Redis

from ira.core.clock import Clock
from ira.core.envelope import Topic, topic_name
from ira.runtime.bus.together import TogetherPublisher
from ira.runtime.http import Lane, Route
from ira.runtime.platform import Platform
from ira.runtime.settings import Settings
from ira.sources.api import ingest_lane
from ira.sources.ingest import Ingest, Publisher
from ira.sources.metrics import SourceMetrics


def redis_prefix_for(settings: Settings) -> str:
    """Keys per environment: a staging replay never collides with production's dedupe marks."""
    return f"ira:{settings.environment}:sources:"


def build_lane(
    settings: Settings,
    *,
    redis: Redis,
    publisher: Publisher,
    clock: Clock,
    registry: CollectorRegistry,
    redis_prefix: str | None = None,
    environment: str | None = None,
) -> Lane:
    """The ingest lane wired to real clients (``routers`` uses it; so do tests and benchmarks).

    ``environment`` overrides ``settings.environment`` for the topic (tests use unique ones).
    """
    topic = topic_name(Topic.ALERTS, environment or settings.environment)
    ingest = Ingest(sources=settings.sources, topic=topic, redis=redis, publisher=publisher, clock=clock,
                    redis_prefix=redis_prefix or redis_prefix_for(settings))
    return ingest_lane(ingest, SourceMetrics.on(registry))


class SourcesRole:
    """Webhook ingest: ``POST /v1/sources/{kind}/{source_id}``."""

    name = "sources"

    def routers(self, platform: Platform) -> Sequence[Route]:
        """The ingest lane; its metrics register once on the platform's registry, however many apps."""
        return [build_lane(platform.settings, redis=platform.redis, publisher=TogetherPublisher(platform.producer),
                             clock=platform.clock, registry=platform.metrics.registry)]

    async def run(self, platform: Platform, stop: asyncio.Event) -> None:
        """Nothing to do in the background: the work happens in the HTTP routes."""
        await stop.wait()


role = SourcesRole()
