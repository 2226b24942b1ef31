"""The notifier role's composition root: the channel from settings, the delivery consumer."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

import httpx

from ira.connectors.slack.client import SlackChatPoster, build_web_client
from ira.connectors.slack.errors import SlackRejectedError
from ira.notifier.sink import StagingSink
from ira.notifier.slack import SlackChannel
from ira.notifier.webhook import NoChannel, WebhookChannel
from ira.notifier.worker import Channel, Notifier, notifier_consumer
from ira.runtime.fault import FaultPoints
from ira.runtime.platform import Platform
from ira.runtime.readiness import ReadinessCheck
from ira.runtime.settings import Settings
from ira.runtime.wiring import consumer_settings, set_lag, set_park

if TYPE_CHECKING:
    from fastapi import APIRouter


def build_channel(platform: Platform, client: httpx.AsyncClient) -> Channel:
    """The webhook when configured; otherwise deliveries are recorded as failed (no channel)."""
    s = platform.settings.notifier
    if s.webhook_url is None or s.webhook_secret is None:
        return NoChannel(platform.clock)
    return WebhookChannel(s.webhook_url, s.webhook_secret.get_secret_value(), client, clock=platform.clock,
                          timeout=s.timeout)


def build_slack_channel(platform: Platform) -> SlackChannel | None:
    """The Slack channel when a bot token and signing secret are configured."""
    slack = platform.settings.slack
    if not slack.enabled or slack.bot_token is None:
        return None
    poster = SlackChatPoster(build_web_client(slack.bot_token.get_secret_value(), api_url=slack.api_url),
                             redactor=platform.settings.redactor())
    return SlackChannel(poster, platform.db, channel=slack.channel, clock=platform.clock,
                        chat_users={a.principal: a.slack_user for a in slack.approvers}, channels=slack.channels)


class NotifierRole:
    """``ira worker --role notifier``."""

    name = "notifier"

    def routers(self, platform: Platform) -> Sequence[APIRouter]:
        return ()

    def doctor_checks(self, settings: Settings) -> Mapping[str, ReadinessCheck]:
        """``slack``: ``auth.test`` with the bot token and the bot's membership of every configured
        channel (the default and each tenant's); a failure names the channel."""
        slack = settings.slack
        if not slack.enabled or slack.bot_token is None:
            return {}
        poster = SlackChatPoster(build_web_client(slack.bot_token.get_secret_value(), api_url=slack.api_url))

        async def check() -> None:
            for channel in slack.all_channels():
                try:
                    await poster.check(channel)
                except SlackRejectedError as exc:
                    raise SlackRejectedError(f"{exc.error} ({channel})") from exc

        return {"slack": check}

    async def run(self, platform: Platform, stop: asyncio.Event) -> None:
        s = platform.settings
        async with httpx.AsyncClient() as client:
            slack = build_slack_channel(platform)
            notifier = Notifier(platform.db, build_channel(platform, client), platform.clock,
                                max_attempts=s.notifier.max_attempts, backoff=s.notifier.backoff,
                                faults=FaultPoints(s.faults),
                                others=[StagingSink(platform.clock), *([slack] if slack else [])])
            consumer = notifier_consumer(notifier, bootstrap=platform.kafka_bootstrap, producer=platform.producer,
                                         environment=s.environment,
                                         settings=consumer_settings(s), db=platform.db,
                                         on_lag=lambda lags: set_lag(platform.metrics, "notifier", lags),
                                         on_parked=lambda summary: set_park(platform.metrics, "notifier", summary))
            await consumer.run(stop)


role = NotifierRole()
