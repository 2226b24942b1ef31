"""The sources role: the webhook edge. Composition root: builds the use-case from the Platform.

``ingest.ack`` picks the commit point (:mod:`ira.sources.accept`): the store's outbox through
a group commit (default), or the broker's acks through a shared producer pass.

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
from ira.core.grouping import group_key, group_labels
from ira.runtime.bus.together import TogetherPublisher
from ira.runtime.fault import FaultPoints
from ira.runtime.http import Lane, Route
from ira.runtime.platform import Platform
from ira.runtime.settings import Settings
from ira.runtime.store.group_commit import GroupCommit
from ira.sources.accept import Acceptance, BrokerAcceptance, Outbox, Publisher, StoreAcceptance
from ira.sources.api import ingest_lane
from ira.sources.dedupe import EdgeDedupe
from ira.sources.ingest import Ingest
from ira.sources.metrics import SourceMetrics
from ira.sources.urgent import FirstOfGroup


def redis_prefix_for(settings: Settings) -> str:
    """Keys per environment: a staging replay never collides with production's dedupe marks."""
    return f"ira:{settings.environment}:sources:"


def build_lane(
    settings: Settings,
    *,
    redis: Redis,
    clock: Clock,
    registry: CollectorRegistry,
    publisher: Publisher | None = None,
    outbox: Outbox | None = None,
    redis_prefix: str | None = None,
    environment: str | None = None,
) -> Lane:
    """The ingest lane wired to real clients (``routers`` uses it; so do tests and benchmarks).

    ``outbox`` is needed with ``ingest.ack: store``, ``publisher`` with ``broker``.
    ``environment`` overrides ``settings.environment`` for the topic (tests use unique ones).
    """
    topic = topic_name(Topic.ALERTS, environment or settings.environment)
    dedupe = EdgeDedupe(redis, prefix=redis_prefix or redis_prefix_for(settings))
    acceptance: Acceptance
    if settings.ingest.ack == "store":
        if outbox is None:
            raise ValueError("ingest.ack: store needs the store's outbox")
        acceptance = StoreAcceptance(dedupe=dedupe, outbox=outbox, topic=topic, faults=FaultPoints(settings.faults),
                                     urgent=FirstOfGroup(lambda alert: group_key(group_labels(
                                         alert, settings.triage.group_by_for(alert.tenant_id)))))
    else:
        if publisher is None:
            raise ValueError("ingest.ack: broker needs a publisher")
        acceptance = BrokerAcceptance(dedupe=dedupe, publisher=publisher, topic=topic)
    ingest = Ingest(sources=settings.sources, dedupe=dedupe, acceptance=acceptance, clock=clock,
                    limits=settings.ingest)
    return ingest_lane(ingest, SourceMetrics.on(registry))


class SourcesRole:
    """Webhook ingest: ``POST /v1/sources/{kind}/{source_id}``."""

    name = "sources"

    def routers(self, platform: Platform) -> Sequence[Route]:
        """The ingest lane; its metrics register once on the platform's registry, however many apps."""
        settings = platform.settings
        if settings.ingest.ack == "store":
            outbox = GroupCommit(platform.db, platform.clock, timeout=settings.ingest.commit_timeout)
            return [build_lane(settings, redis=platform.redis, outbox=outbox, clock=platform.clock,
                               registry=platform.metrics.registry)]
        return [build_lane(settings, redis=platform.redis, publisher=TogetherPublisher(platform.producer),
                           clock=platform.clock, registry=platform.metrics.registry)]

    async def run(self, platform: Platform, stop: asyncio.Event) -> None:
        """Nothing to do in the background: the work happens in the HTTP routes."""
        await stop.wait()


role = SourcesRole()
