"""Build the runtime's own workers (relay, scanner, step dispatch) from a Platform."""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext
from datetime import timedelta
from functools import partial

from ira.core.envelope import Envelope, Topic, topic_name
from ira.runtime.bus.admin import ensure_topics
from ira.runtime.bus.consumer import ConsumerRunner, ConsumerSettings
from ira.runtime.bus.inbox import BatchHooks
from ira.runtime.bus.record import InboxHandler, Outcome, PlainHandler, RecordMeta, RecordOutcome
from ira.runtime.dispatch import StepDispatcher, StepHandler
from ira.runtime.doorbell import Doorbell, doorbell_channel, listen
from ira.runtime.fault import FaultPoints
from ira.runtime.platform import Platform
from ira.runtime.relay import OutboxRelay
from ira.runtime.scanner import Scanner, ScanReport
from ira.runtime.settings import Settings
from ira.runtime.store.parked import ParkSummary
from ira.runtime.telemetry import Metrics


class PlatformTopics:
    """The TopicAdmin of one environment on the platform's broker."""

    def __init__(self, platform: Platform) -> None:
        self._platform = platform

    async def ensure_topics(self) -> list[str]:
        p = self._platform
        return await ensure_topics(p.kafka_bootstrap, p.settings.environment, partitions=p.settings.kafka.partitions,
                                   replication=p.settings.kafka.replication_factor)


def worker_id(role: str) -> str:
    """Who holds a claim: readable in the dashboard, unique per process."""
    return f"{role}@{socket.gethostname()}:{os.getpid()}"


RELAY_LANES: tuple[tuple[Topic, ...], ...] = (
    (Topic.INCIDENTS, Topic.STEPS, Topic.DELIVERIES),  # a new run, a step, a notification: someone waits
    (Topic.ALERTS, Topic.RUN_EVENTS, Topic.DLQ),
)
"""What the relay publishes first; anything else (a storm's follow-ups on ira.incident-updates.v1) last."""


def build_relay(platform: Platform) -> OutboxRelay:
    tuning = platform.settings.runtime
    env = platform.settings.environment
    return OutboxRelay(db=platform.db, publisher=platform.producer, clock=platform.clock,
                       relay_id=worker_id("relay"), lease=tuning.outbox_claim_lease,
                       batch_size=tuning.relay_batch_size, poll_interval=tuning.relay_poll_interval,
                       faults=FaultPoints(platform.settings.faults), admin=PlatformTopics(platform),
                       on_published=platform.metrics.relay_published.inc,
                       lanes=[[topic_name(t, env) for t in lane] for lane in RELAY_LANES],
                       pack=frozenset({topic_name(Topic.ALERTS, env)} if tuning.relay_pack_alerts else ()),
                       bell=partial(listen, platform.redis, doorbell_channel(env)) if tuning.relay_doorbell else None)


def ringing(platform: Platform, *, relays_here: bool) -> AbstractContextManager[None]:
    """While a process without a relay runs: its commits that leave a row to relay ring the
    doorbell (``runtime.relay_doorbell``), so another process's relay passes at once."""
    if relays_here or not platform.settings.runtime.relay_doorbell:
        return nullcontext()
    bell = Doorbell(platform.redis, doorbell_channel(platform.settings.environment))
    return platform.db.waking_relay(bell.ring)


def build_scanner(platform: Platform) -> Scanner:
    tuning = platform.settings.runtime
    return Scanner(db=platform.db, clock=platform.clock, environment=platform.settings.environment,
                   admin=PlatformTopics(platform), interval=tuning.scanner_interval,
                   quiet=tuning.scanner_interval * 2, resend_after=tuning.resend_after,
                   on_report=lambda r: record_scan(platform.metrics, r, platform.settings.environment))


def record_scan(metrics: Metrics, report: ScanReport, environment: str) -> None:
    """The outbox's backlog per topic of the environment (0 when drained), the re-sends, and
    the work waiting in the store (approvals, UNKNOWN Operations, deliveries)."""
    age = report.outbox_oldest_age
    metrics.outbox_oldest_unsent_age.set(age.total_seconds() if age else 0)
    for topic in (topic_name(t, environment) for t in Topic):
        count, oldest = report.unsent.get(topic, (0, timedelta(0)))
        metrics.outbox_unsent.labels(topic=topic).set(count)
        metrics.outbox_unsent_age.labels(topic=topic).set(oldest.total_seconds())
    for topic, count in report.resent.items():
        metrics.outbox_resent.labels(topic=topic).inc(count)
    for queue, waiting in (("approvals", report.backlog.approvals_waiting),
                           ("operations_unknown", report.backlog.operations_unknown),
                           ("deliveries", report.backlog.deliveries_pending)):
        metrics.waiting.labels(queue=queue).set(waiting.count)
        metrics.waiting_oldest_age.labels(queue=queue).set(waiting.oldest_age.total_seconds())


def build_dispatcher(platform: Platform, role: str, handlers: Mapping[str, StepHandler]) -> StepDispatcher:
    claims = platform.metrics.claims
    return StepDispatcher(db=platform.db, clock=platform.clock, handlers=handlers, owner=worker_id(role),
                          lease=platform.settings.runtime.step_lease, faults=FaultPoints(platform.settings.faults),
                          on_claim=lambda result: claims.labels(result=result).inc())


def build_consumer(
    platform: Platform, *, name: str, topics: Sequence[Topic], handler: InboxHandler | PlainHandler,
    inbox: bool = True, group_id: str | None = None, batch_size: int = 1,
    batch_hooks: BatchHooks | None = None,
) -> ConsumerRunner:
    """A consumer of this environment's ``topics`` whose outcomes and lag feed /metrics."""
    env = platform.settings.environment
    return ConsumerRunner(
        bootstrap=platform.kafka_bootstrap, group_id=group_id or f"ira-{name}",
        topics=[topic_name(t, env) for t in topics], name=name, handler=handler, producer=platform.producer,
        dlq_topic=topic_name(Topic.DLQ, env), db=platform.db, inbox=inbox, clock=platform.clock,
        settings=consumer_settings(platform.settings, batch_size=batch_size), batch_hooks=batch_hooks,
        on_outcome=lambda outcome: observe_outcome(platform.metrics, outcome),
        on_lag=lambda lags: set_lag(platform.metrics, name, lags),
        on_parked=lambda summary: set_park(platform.metrics, name, summary))


def consumer_settings(settings: Settings, *, batch_size: int = 1,
                      fetch_wait: timedelta = ConsumerSettings.fetch_wait) -> ConsumerSettings:
    """The runner's tuning from ira.yaml (``kafka.session_timeout``, ``consumer:``), for every role."""
    return ConsumerSettings(session_timeout=settings.kafka.session_timeout, fetch_wait=fetch_wait,
                            batch_size=batch_size, max_hold=settings.consumer.max_hold,
                            park_poll=settings.consumer.park_poll,
                            max_unexpected_attempts=settings.consumer.max_unexpected_attempts,
                            idle_fetch_wait=settings.consumer.idle_fetch_wait, idle_after=settings.consumer.idle_after,
                            faults=settings.faults)


def build_step_consumer(platform: Platform, role: str, dispatcher: StepDispatcher) -> ConsumerRunner:
    """Wake-ups on ``ira.steps.v1`` feeding ``dispatcher`` (no inbox: the claim is the dedupe)."""

    async def on_wakeup(envelope: Envelope, meta: RecordMeta) -> None:
        await dispatcher.handle_wakeup(envelope)

    return build_consumer(platform, name=f"{role}-steps", topics=[Topic.STEPS], handler=on_wakeup, inbox=False)


_CONFLICT_CODES = {"concurrent_update": "state", "stale_epoch": "epoch"}


def observe_outcome(metrics: Metrics, outcome: RecordOutcome) -> None:
    """Count one consumer outcome. The lag gauges are refreshed by the runner after each fetch
    round's commits (``on_lag``), not per record: an outcome comes before its commit, so the
    lag read here was the old one anyway, at a labelled gauge per partition per record."""
    name = outcome.consumer
    if outcome.outcome == Outcome.PROCESSED:
        metrics.messages_handled.labels(consumer=name).inc()
    elif outcome.outcome == Outcome.DUPLICATE:
        metrics.messages_duplicate.labels(consumer=name).inc()
    elif outcome.outcome == Outcome.DEAD_LETTERED:
        metrics.dlq.labels(consumer=name, reason=outcome.error_code or "unknown").inc()
    if outcome.error_code in _CONFLICT_CODES:
        metrics.conflicts.labels(kind=_CONFLICT_CODES[outcome.error_code]).inc()


def set_park(metrics: Metrics, consumer: str, summary: ParkSummary) -> None:
    """The park gauges of one consumer (parked, oldest parked age, dead letters kept): each re-drive poll."""
    metrics.parked.labels(consumer=consumer).set(summary.parked)
    metrics.parked_oldest_age.labels(consumer=consumer).set(summary.oldest_parked_age.total_seconds())
    metrics.dead_letters.labels(consumer=consumer).set(summary.dead_lettered)


def set_lag(metrics: Metrics, consumer: str, lags: Mapping[tuple[str, int], int]) -> None:
    """The lag gauges of one consumer: refreshed on outcomes and after every fetch round."""
    for (topic, partition), lag in lags.items():
        metrics.consumer_lag.labels(consumer=consumer, topic=topic, partition=str(partition)).set(lag)
