"""Build the runtime's own workers (relay, scanner, step dispatch) from a Platform."""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping

from ira.runtime.bus.admin import ensure_topics
from ira.runtime.dispatch import StepDispatcher, StepHandler
from ira.runtime.fault import FaultPoints
from ira.runtime.platform import Platform
from ira.runtime.relay import OutboxRelay
from ira.runtime.scanner import Scanner


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


def build_relay(platform: Platform) -> OutboxRelay:
    tuning = platform.settings.runtime
    return OutboxRelay(db=platform.db, publisher=platform.producer, clock=platform.clock,
                       relay_id=worker_id("relay"), lease=tuning.outbox_claim_lease,
                       batch_size=tuning.relay_batch_size, poll_interval=tuning.relay_poll_interval,
                       faults=FaultPoints(platform.settings.faults), admin=PlatformTopics(platform),
                       on_published=platform.metrics.relay_published.inc)


def build_scanner(platform: Platform) -> Scanner:
    tuning = platform.settings.runtime
    return Scanner(db=platform.db, clock=platform.clock, environment=platform.settings.environment,
                   admin=PlatformTopics(platform), interval=tuning.scanner_interval,
                   quiet=tuning.scanner_interval * 2,
                   on_report=lambda r: _record_backlog(platform, r.outbox_oldest_age))


def _record_backlog(platform: Platform, age) -> None:  # type: ignore[no-untyped-def]
    platform.metrics.outbox_oldest_unsent_age.set(age.total_seconds() if age else 0)


def build_dispatcher(platform: Platform, role: str, handlers: Mapping[str, StepHandler]) -> StepDispatcher:
    return StepDispatcher(db=platform.db, clock=platform.clock, handlers=handlers, owner=worker_id(role),
                          lease=platform.settings.runtime.step_lease)
