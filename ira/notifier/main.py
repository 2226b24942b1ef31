"""The notifier role's composition root: the channel from settings, the delivery consumer."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import TYPE_CHECKING

import httpx

from ira.notifier.webhook import NoChannel, WebhookChannel
from ira.notifier.worker import Channel, Notifier, notifier_consumer
from ira.runtime.bus.consumer import ConsumerSettings
from ira.runtime.fault import FaultPoints
from ira.runtime.platform import Platform

if TYPE_CHECKING:
    from fastapi import APIRouter


def build_channel(platform: Platform, client: httpx.AsyncClient) -> Channel:
    """The webhook when configured; otherwise deliveries are recorded as failed (no channel)."""
    s = platform.settings.notifier
    if s.webhook_url is None or s.webhook_secret is None:
        return NoChannel(platform.clock)
    return WebhookChannel(s.webhook_url, s.webhook_secret.get_secret_value(), client, clock=platform.clock,
                          timeout=s.timeout)


class NotifierRole:
    """``ira worker --role notifier``."""

    name = "notifier"

    def routers(self, platform: Platform) -> Sequence[APIRouter]:
        return ()

    async def run(self, platform: Platform, stop: asyncio.Event) -> None:
        s = platform.settings
        async with httpx.AsyncClient() as client:
            notifier = Notifier(platform.db, build_channel(platform, client), platform.clock,
                                max_attempts=s.notifier.max_attempts, backoff=s.notifier.backoff,
                                faults=FaultPoints(s.faults))
            consumer = notifier_consumer(notifier, bootstrap=platform.kafka_bootstrap, producer=platform.producer,
                                         environment=s.environment,
                                         settings=ConsumerSettings(session_timeout=s.kafka.session_timeout,
                                                                   faults=s.faults))
            await consumer.run(stop)


role = NotifierRole()
