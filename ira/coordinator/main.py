"""The coordinator role's composition root: builds the ticket system, the dispatcher and
the consumers from the Platform; serves the commands (cancel, decide)."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from datetime import timedelta
from typing import TYPE_CHECKING

from ira.connectors.slack.client import SlackChatPoster, build_web_client
from ira.connectors.slack.interactions import InteractionVerifier
from ira.connectors.tickets.fault import FaultPointTicketSystem
from ira.connectors.tickets.sandbox import SandboxTicketSystem
from ira.connectors.tickets.tenants import build_ticket_systems, remote_ticket_system
from ira.coordinator.api import build_router
from ira.coordinator.config import WorkflowConfig
from ira.coordinator.deps import Deps
from ira.coordinator.handlers import step_handlers
from ira.coordinator.slack import SlackInteractions, build_slack_router
from ira.coordinator.worker import CoordinatorWorker
from ira.core.clock import SystemClock
from ira.runtime.bus.record import Outcome, RecordOutcome
from ira.runtime.fault import FaultPoints
from ira.runtime.platform import Platform
from ira.runtime.readiness import ReadinessCheck
from ira.runtime.settings import Settings
from ira.runtime.wiring import build_dispatcher, consumer_settings, set_lag, set_park

if TYPE_CHECKING:
    from fastapi import APIRouter


STEP_FETCH_WAIT = timedelta(milliseconds=100)
"""Each step of a run is one hop through the broker: a short fetch wait keeps a hop ~10x
below the broker's default 500 ms hold (the embedded broker holds a fetch the full time)."""
DECISION_FETCH_WAIT = timedelta(milliseconds=20)
"""The run requests' consumer: a new run's hop from triage's publish is up to ~half of this on
the embedded broker (a decision's publish -> the coordinator's handler, p50: ~11 ms at 50 ms,
~6 ms at 20 ms, ~4.5 ms at 10 ms); idle, the polls cost ~2.3 % of a core in the coordinator
and ~2.7 % in the broker at 20 ms (0.9 % and 1.0 % at 100 ms; bench/README.md, 2026-12-04), so
after ``consumer.idle_after`` without a record these consumers fetch with
``consumer.idle_fetch_wait`` instead (:mod:`ira.runtime.bus.pace`)."""


def build_deps(platform: Platform) -> Deps:
    systems, faults = build_ticket_systems(platform.settings, platform.db, platform.clock), \
        FaultPoints(platform.settings.faults)
    return Deps(db=platform.db, clock=platform.clock, config=WorkflowConfig.from_settings(platform.settings),
                tickets=FaultPointTicketSystem(systems, faults), faults=faults,
                sandbox_tickets=SandboxTicketSystem(platform.db, platform.clock))


def build_worker(platform: Platform) -> CoordinatorWorker:
    deps = build_deps(platform)
    dispatcher = build_dispatcher(platform, "coordinator", step_handlers(deps))
    settings = platform.settings
    return CoordinatorWorker(
        deps, dispatcher, bootstrap=platform.kafka_bootstrap, producer=platform.producer,
        consumer=consumer_settings(settings, fetch_wait=STEP_FETCH_WAIT), decisions_fetch_wait=DECISION_FETCH_WAIT,
        max_concurrent=settings.coordinator.max_concurrent_steps, on_outcome=lambda o: _count(platform, o),
        on_lag=lambda consumer, lags: set_lag(platform.metrics, consumer, lags),
        on_parked=lambda consumer, summary: set_park(platform.metrics, consumer, summary))


def slack_interactions(platform: Platform, deps: Deps) -> SlackInteractions:
    """``/slack/interactions`` with the bot's client (only called when Slack is configured)."""
    slack = platform.settings.slack
    assert slack.bot_token is not None and slack.signing_secret is not None
    poster = SlackChatPoster(build_web_client(slack.bot_token.get_secret_value(), api_url=slack.api_url),
                             redactor=platform.settings.redactor())
    return SlackInteractions(platform.settings, deps, poster=poster, metrics=platform.metrics,
                             verifier=InteractionVerifier(slack.signing_secret.get_secret_value(), platform.clock))


def _count(platform: Platform, outcome: RecordOutcome) -> None:
    m = platform.metrics
    if outcome.outcome == Outcome.PROCESSED:
        m.messages_handled.labels(outcome.consumer).inc()
    elif outcome.outcome == Outcome.DUPLICATE:
        m.messages_duplicate.labels(outcome.consumer).inc()
    elif outcome.outcome == Outcome.DEAD_LETTERED:
        m.dlq.labels(outcome.consumer, outcome.error_code or "unknown").inc()


class CoordinatorRole:
    """``ira worker --role coordinator``."""

    name = "coordinator"

    def routers(self, platform: Platform) -> Sequence[APIRouter]:
        deps = build_deps(platform)
        found = [build_router(platform.settings, deps)]
        if platform.settings.slack.enabled:
            found.append(build_slack_router(slack_interactions(platform, deps)))
        return found

    async def run(self, platform: Platform, stop: asyncio.Event) -> None:
        await build_worker(platform).run(stop)

    def doctor_checks(self, settings: Settings) -> dict[str, ReadinessCheck]:
        """One line per tenant whose tickets go to Jira or GitHub (credentials, project/repo)."""
        return {f"tickets {tenant} ({config.kind})": remote_ticket_system(config, SystemClock()).check
                for tenant, config in settings.ticket_tenants().items() if config.kind != "builtin"}


role = CoordinatorRole()
