"""A run waiting for approval with Slack as its channel: the fake Slack Web API, the notifier's
Slack channel in front of it, and the API app with ``/slack/interactions``."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import httpx

from ira.connectors.slack.client import SlackChatPoster, build_web_client
from ira.connectors.slack.interactions import InteractionVerifier
from ira.coordinator.api import build_router
from ira.coordinator.deps import Deps
from ira.coordinator.slack import SlackInteractions, build_slack_router
from ira.core.clock import FrozenClock
from ira.core.operation import Approval
from ira.core.ports import TicketSystem
from ira.notifier.slack import SlackChannel
from ira.notifier.webhook import NoChannel
from ira.notifier.worker import Notifier
from ira.runtime.http import create_app
from ira.runtime.settings import Settings
from ira.runtime.store.database import Database
from ira.runtime.telemetry import Metrics
from tests.coordinator.harness import T0, Pump, api_settings, build, decision, envelope, run_for_incident
from tests.coordinator.test_approvals import waiting_for_approval
from tests.fakes.slack import BOT_TOKEN, CHANNEL_ID, SIGNING_SECRET, FakeSlack, fake_slack
from tests.fakes.slack_interactions import block_actions_body, buttons_of, signed_headers, view_submission_body

LEAD, VIEWER, STRANGER = "U0DEVLEAD", "U0VIEWER", "U0STRANGER"
DASHBOARD = "http://ira.test"


def slack_settings(api_url: str) -> Settings:
    base = api_settings().model_dump(mode="python")
    base["api_tokens"] = [{**t, "token": t["token"].get_secret_value()} for t in base["api_tokens"]]
    base["slack"] = {"bot_token": BOT_TOKEN, "signing_secret": SIGNING_SECRET, "api_url": api_url,
                     "channel": CHANNEL_ID, "dashboard_url": DASHBOARD, "approvers": [
                         {"slack_user": LEAD, "principal": "lead", "roles": ["approver"]},
                         {"slack_user": VIEWER, "principal": "viewer", "roles": ["viewer"]}]}
    return Settings.model_validate(base)


@dataclass
class SlackRig:
    pump: Pump
    deps: Deps
    clock: FrozenClock
    run_id: str
    approval: Approval | None
    slack: FakeSlack
    notifier: Notifier
    interactions: SlackInteractions
    client: httpx.AsyncClient
    sent: int = 0
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def approval_id(self) -> str:
        assert self.approval is not None
        return self.approval.approval_id

    async def notify(self) -> None:
        """Hand every committed notification not handed yet to the notifier."""
        while self.sent < len(self.pump.deliveries):
            await self.notifier.handle(self.pump.deliveries[self.sent])
            self.sent += 1

    def approval_posts(self) -> list[dict[str, Any]]:
        """Messages showing a draft (they open with a header block), in posting order."""
        return [m for m in self.slack.posts() if (m.get("blocks") or [{}])[0].get("type") == "header"]

    async def click(self, message: dict[str, Any], *, user: str = LEAD, action: str = "approve",
                    action_ts: str | None = None, headers: dict[str, str] | None = None,
                    body: bytes | None = None) -> httpx.Response:
        body = body or self.click_body(message, user=user, action=action, action_ts=action_ts)
        sent = headers or signed_headers(SIGNING_SECRET, body, timestamp=int(self.clock.now().timestamp()))
        answer = await self.client.post("/slack/interactions", content=body, headers=sent)
        await self.settled()
        return answer

    async def submit(self, view: dict[str, Any], *, inputs: dict[str, str], user: str = LEAD,
                     headers: dict[str, str] | None = None, body: bytes | None = None) -> httpx.Response:
        """Submit the modal ``view`` (as the fake recorded it when it was opened)."""
        body = body or view_submission_body(user=user, view=view, inputs=inputs)
        sent = headers or signed_headers(SIGNING_SECRET, body, timestamp=int(self.clock.now().timestamp()))
        answer = await self.client.post("/slack/interactions", content=body, headers=sent)
        await self.settled()
        return answer

    def click_body(self, message: dict[str, Any], *, user: str = LEAD, action: str = "approve",
                   action_ts: str | None = None) -> bytes:
        return block_actions_body(user=user, action_id=action, value=buttons_of(message)[action],
                                  channel=self.channel_of(message), message_ts=message["ts"], action_ts=action_ts,
                                  thread_ts=message.get("thread_ts"), message=message)

    def channel_of(self, message: dict[str, Any]) -> str:
        return next((c for c, posted in self.slack.messages.items() if message in posted), CHANNEL_ID)

    async def settled(self) -> None:
        """The follow-ups started after the interaction's answer (message update, ephemeral)."""
        while self.interactions.follow_ups:
            await asyncio.gather(*list(self.interactions.follow_ups))


@asynccontextmanager
async def slack_rig(db: Database, *, latency: float = 0.0, max_attempts: int = 4,
                    behaviour: dict[str, str] | None = None, tickets: TicketSystem | None = None,
                    channels: dict[str, str] | None = None) -> AsyncIterator[SlackRig]:
    """A run waiting for approval; with ``behaviour`` (scripted branches), wherever that leads.
    ``channels``: tenants' own channels (the fake gets them, the bot a member of each)."""
    if behaviour is None:
        pump, deps, clock, _, run_id, approval = await waiting_for_approval(
            db, notification_channel="slack", dashboard_url=DASHBOARD, **({"tickets": tickets} if tickets else {}))
    else:
        pump, deps, clock, run_id = await _started(db, behaviour)
        approval = None
    async with fake_slack(latency=latency) as slack:
        for own in (channels or {}).values():
            slack.messages.setdefault(own, [])
            slack.members.add(own)
        settings = slack_settings(slack.url)
        poster = SlackChatPoster(build_web_client(BOT_TOKEN, api_url=slack.url))
        channel = SlackChannel(poster, db, channel=CHANNEL_ID, clock=clock, chat_users={"lead": LEAD},
                               channels=channels)
        notifier = Notifier(db, NoChannel(clock), clock, others=[channel], max_attempts=max_attempts,
                            backoff=timedelta(milliseconds=10))
        metrics = Metrics()
        interactions = SlackInteractions(settings, deps, poster=poster, metrics=metrics,
                                         verifier=InteractionVerifier(SIGNING_SECRET, clock))
        app = create_app(metrics=metrics, routers=[build_router(settings, deps),
                                                   build_slack_router(interactions)])
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://ira") as client:
            rig = SlackRig(pump=pump, deps=deps, clock=clock, run_id=run_id, approval=approval, slack=slack,
                           notifier=notifier, interactions=interactions, client=client)
            try:
                yield rig
            finally:
                await rig.settled()
                await pump.close()


async def _started(db: Database, behaviour: dict[str, str]) -> tuple[Pump, Deps, FrozenClock, str]:
    clock = FrozenClock(T0)
    pump, deps = build(db, clock=clock, behaviour=behaviour, notification_channel="slack", dashboard_url=DASHBOARD)
    d = decision()
    await pump.decide(envelope(d))
    await pump.drain()
    run = await run_for_incident(db, d.incident_id)
    assert run is not None
    return pump, deps, clock, run.run_id
