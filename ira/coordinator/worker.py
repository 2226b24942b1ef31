"""The coordinator's loops: run requests and incident updates in (inbox mode), coordinator steps and timers.

Run requests and incident updates are applied in their consumer's transaction (exactly once via
the inbox). A run request committed by this very process (triage beside the coordinator, as in
``ira dev``) is applied right after triage's commit (eager dispatch), with the decisions
consumer's inbox row: a new incident's run then waits neither for the relay nor for the
broker, however many alerts a storm queued there; the broker's copy is dropped by the inbox.
Step wake-ups are hints: each starts a claim attempt in its own task (bounded, ``StepIntake``),
so a slow step never holds a partition; a step this process's own commit made ready starts right
after that commit (eager dispatch); a wake-up lost with this process is re-sent by the scanner.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Callable
from datetime import timedelta
from typing import TypeVar

from sqlalchemy.ext.asyncio import AsyncConnection

from ira.coordinator.deps import Deps
from ira.coordinator.intake import apply_decision, parse_decision
from ira.coordinator.timeouts import handle_timer
from ira.coordinator.updates import apply_update, parse_update
from ira.core.alert import DecisionKind
from ira.core.decision import DECISION_MESSAGE, DECISIONS_INBOX, UPDATES_INBOX
from ira.core.envelope import PRODUCTION, Envelope, Topic, topic_name
from ira.runtime.bus.consumer import ConsumerRunner, ConsumerSettings
from ira.runtime.bus.eager import EagerInbox
from ira.runtime.bus.producer import BusProducer
from ira.runtime.bus.record import RecordMeta, RecordOutcome
from ira.runtime.dispatch import StepDispatcher
from ira.runtime.intake import StepIntake
from ira.runtime.store.parked import ParkSummary
from ira.runtime.wakeup import TIMER_FIRED

log = logging.getLogger(__name__)
DECISIONS_CONSUMER = DECISIONS_INBOX
STEPS_CONSUMER = "coordinator-steps"
UPDATES_CONSUMER = UPDATES_INBOX
EAGER_DECISIONS = 8
"""Run requests applied in-process at once; beyond that they are left to their broker copies."""


def group_prefix(environment: str) -> str:
    """Consumer groups are per environment, like topics: staging never steals prod's work."""
    return "" if environment == PRODUCTION else f"{environment}."


class CoordinatorWorker:
    """Runs until stopped; ``dispatcher`` holds the handlers of the coordinator's step kinds."""

    def __init__(
        self, deps: Deps, dispatcher: StepDispatcher, *, bootstrap: str, producer: BusProducer,
        consumer: ConsumerSettings = ConsumerSettings(), max_concurrent: int = 16, group_suffix: str = "",
        decisions_fetch_wait: timedelta | None = None,
        on_outcome: Callable[[RecordOutcome], None] | None = None,
        on_lag: Callable[[str, dict[tuple[str, int], int]], None] | None = None,
        on_parked: Callable[[str, ParkSummary], None] | None = None,
    ) -> None:
        """``on_lag(consumer, lags)``: each consumer's lag per (topic, partition), ``on_parked(consumer,
        summary)``: each consumer's parked records and dead letters, for /metrics.
        ``decisions_fetch_wait``: the run requests' consumer's own fetch wait (default: the
        others'). On the embedded broker a fetch is answered when its wait ends, not when a record
        arrives, so a new run's first hop is up to about half of it: a short wait here is the
        start of every run that came through the broker, at the cost of an idle poll more often
        on this one consumer (steps come eagerly, updates may wait)."""
        env = deps.config.environment
        prefix, dlq = group_prefix(env), topic_name(Topic.DLQ, env)
        self.deps, self.dispatcher = deps, dispatcher
        self.decisions = ConsumerRunner(
            bootstrap=bootstrap, group_id=f"{prefix}ira.coordinator{group_suffix}",
            topics=[topic_name(Topic.INCIDENTS, env)], name=DECISIONS_CONSUMER, handler=self._on_decision,
            producer=producer, dlq_topic=dlq, db=deps.db, clock=deps.clock, on_outcome=on_outcome,
            settings=consumer if decisions_fetch_wait is None else dataclasses.replace(
                consumer, fetch_wait=decisions_fetch_wait),
            on_lag=_named(DECISIONS_CONSUMER, on_lag), on_parked=_named(DECISIONS_CONSUMER, on_parked))
        self.updates = ConsumerRunner(  # follow-ups: their own topic and group, never ahead of a new run request
            bootstrap=bootstrap, group_id=f"{prefix}ira.coordinator-updates{group_suffix}",
            topics=[topic_name(Topic.INCIDENT_UPDATES, env)], name=UPDATES_CONSUMER, handler=self._on_update,
            producer=producer, dlq_topic=dlq, db=deps.db, settings=consumer, clock=deps.clock, on_outcome=on_outcome,
            on_lag=_named(UPDATES_CONSUMER, on_lag), on_parked=_named(UPDATES_CONSUMER, on_parked))
        self.steps = ConsumerRunner(
            bootstrap=bootstrap, group_id=f"{prefix}ira.coordinator-steps{group_suffix}",
            topics=[topic_name(Topic.STEPS, env)], name=STEPS_CONSUMER, handler=self._on_step, producer=producer,
            dlq_topic=dlq, db=deps.db, inbox=False, settings=consumer, clock=deps.clock, on_outcome=on_outcome,
            on_lag=_named(STEPS_CONSUMER, on_lag), on_parked=_named(STEPS_CONSUMER, on_parked))
        self.intake = StepIntake(dispatcher, max_concurrent)
        incidents = topic_name(Topic.INCIDENTS, env)
        self.eager = EagerInbox(self.decisions, size=EAGER_DECISIONS, wants=lambda m: (
            m.topic == incidents and m.envelope.type == DECISION_MESSAGE
            and m.envelope.payload.get("decision") == DecisionKind.CREATE_RUN))
        """Run requests this process's triage commits, applied right after its commit."""

    async def _on_decision(self, conn: AsyncConnection, envelope: Envelope, meta: RecordMeta) -> None:
        await apply_decision(conn, parse_decision(envelope), config=self.deps.config, at=self.deps.clock.now())

    async def _on_update(self, conn: AsyncConnection, envelope: Envelope, meta: RecordMeta) -> None:
        if envelope.type == DECISION_MESSAGE:  # an older triage's one-alert deliver decision
            await self._on_decision(conn, envelope, meta)
            return
        await apply_update(conn, parse_update(envelope), config=self.deps.config, at=self.deps.clock.now())

    async def _on_step(self, envelope: Envelope, meta: RecordMeta) -> None:
        if envelope.type == TIMER_FIRED:
            await handle_timer(self.deps, envelope)
        else:
            await self.intake.wakeup(envelope)

    async def run(self, stop: asyncio.Event, *, drain: timedelta = timedelta(seconds=10)) -> None:
        """Consume until ``stop``; meanwhile take the coordinator steps this process's own
        commits make ready (eager dispatch), then give running steps ``drain`` to finish."""
        try:
            with self.intake.eager(self.deps.db), self.eager.listening(self.deps.db):
                await asyncio.gather(self.decisions.run(stop), self.updates.run(stop), self.steps.run(stop))
        finally:
            await self.eager.drain(drain)
            await self.intake.drain(drain)


T = TypeVar("T")


def _named(consumer: str, observer: Callable[[str, T], None] | None) -> Callable[[T], None] | None:
    """An observer of all three consumers, told which one speaks."""
    return None if observer is None else lambda value: observer(consumer, value)
