"""The scanner: re-discovers work from SQL, because Kafka is a wake-up, never the authority.

Each pass (1) makes sure the environment's topics exist (the embedded broker forgets them on
restart), (2) wakes again every READY step nobody holds and every RUNNING step whose lease
expired, (3) fires due timers, (4) sends again every outbox message whose consumer has not
applied it ``resend_after`` after it was sent (:mod:`ira.runtime.store.effects`: an alert
triage has not seen, a decision the coordinator has not applied, a delivery never attempted),
and (5) measures the outbox backlog. Wakes and timer fires go through the outbox, so they are
as durable as any other message. The scanner knows no message kinds: each outbox row names
the consumer (``awaits``) whose inbox must come to hold it.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import TYPE_CHECKING

from sqlalchemy.ext.asyncio import AsyncConnection

from ira.core.clock import Clock
from ira.core.commit import OutboxMessage
from ira.core.envelope import Envelope, Topic, topic_name
from ira.core.errors import TransientError
from ira.core.ids import new_event_id
from ira.core.ports import TopicAdmin
from ira.runtime.pause import pause
from ira.runtime.store import effects, outbox, steps, timers
from ira.runtime.store.backlog import Backlog, read_backlog
from ira.runtime.store.database import Database
from ira.runtime.wakeup import TIMER_FIRED, step_wakeup

if TYPE_CHECKING:
    from fastapi import APIRouter

    from ira.runtime.platform import Platform

log = logging.getLogger(__name__)


@dataclass
class ScanReport:
    """What one pass did (for logs, metrics and tests)."""

    woken: int = 0
    timers_fired: int = 0
    resent: Counter[str] = field(default_factory=Counter)
    """Messages put back to unsent because their consumer had not applied them, per topic."""
    outbox_oldest_age: timedelta | None = None
    unsent: dict[str, tuple[int, timedelta]] = field(default_factory=dict)
    """Per topic: rows waiting for the relay and the oldest one's age."""
    backlog: Backlog = field(default_factory=Backlog)
    """Work waiting in SQL: approvals, UNKNOWN Operations, pending deliveries."""


@dataclass
class Scanner:
    db: Database
    clock: Clock
    environment: str
    admin: TopicAdmin | None = None
    quiet: timedelta = timedelta(seconds=10)
    """A step must have been left alone this long before it is woken again."""
    interval: timedelta = timedelta(seconds=2)
    resend_after: timedelta = timedelta(seconds=30)
    """A sent message whose consumer has not applied it this long after is sent again."""
    batch_size: int = 200
    passes: int = 0
    last: ScanReport = field(default_factory=ScanReport)
    on_report: Callable[[ScanReport], None] = lambda _r: None

    async def scan_once(self) -> ScanReport:
        """A pass. It looks for work with a reader first and opens a write transaction only for
        a kind it found: most passes find nothing, and an empty write transaction still costs
        BEGIN and COMMIT on PostgreSQL and SQLite's one write lock (which the webhook's and
        triage's commits wait for). Each write transaction reads its rows again, so what the
        reader saw only decides whether to look."""
        await self._ensure_topics()
        now = self.clock.now()
        async with self.db.snapshot() as conn:  # on SQLite inline: three LIMIT 1 reads by index
            wake = bool(await steps.find_wakeable(conn, now=now, quiet=self.quiet, limit=1))
            fire = bool(await timers.due_timers(conn, now=now, limit=1))
            settle = await effects.any_to_settle(conn, now=now, after=self.resend_after)
        report = ScanReport(woken=await self._wake_steps() if wake else 0,
                            timers_fired=await self._fire_timers() if fire else 0,
                            resent=await self._resend_unapplied() if settle else Counter())
        async with self.db.reader() as conn:  # counts that grow with the queues: off the loop on SQLite
            await self._measure(conn, report)
        self.passes += 1
        self.last = report
        self.on_report(report)
        return report

    async def _measure(self, conn: AsyncConnection, report: ScanReport) -> None:
        report.outbox_oldest_age = await outbox.oldest_unsent_age(conn, now=self.clock.now())
        report.unsent = await effects.unsent_by_topic(conn, now=self.clock.now())
        report.backlog = await read_backlog(conn, now=self.clock.now())

    async def _ensure_topics(self) -> None:
        if self.admin is not None:
            await self.admin.ensure_topics()

    async def _wake_steps(self) -> int:
        now = self.clock.now()
        async with self.db.transaction() as conn:
            found = await steps.find_wakeable(conn, now=now, quiet=self.quiet, limit=self.batch_size)
            wakeups = [step_wakeup(s.tenant_id, s.run_id, s.step_id, kind=s.kind, environment=self.environment,
                                   at=now) for s in found]
            await outbox.enqueue(conn, wakeups, at=now)
            for step in found:
                await steps.mark_woken(conn, step, now=now)
        return len(found)

    async def _resend_unapplied(self) -> Counter[str]:
        async with self.db.transaction() as conn:
            return await effects.resend_unapplied(conn, now=self.clock.now(), after=self.resend_after,
                                                  limit=self.batch_size)

    async def _fire_timers(self) -> int:
        now = self.clock.now()
        fired = 0
        async with self.db.transaction() as conn:
            for timer in await timers.due_timers(conn, now=now, limit=self.batch_size):
                if await timers.mark_fired(conn, timer, now=now):
                    await outbox.enqueue(conn, [self._timer_message(timer)], at=now)
                    fired += 1
        return fired

    def _timer_message(self, timer: timers.Timer) -> OutboxMessage:
        envelope = Envelope(message_id=new_event_id(), type=TIMER_FIRED, tenant_id=timer.tenant_id,
                            occurred_at=self.clock.now(), payload=timer.model_dump(mode="json"))
        return OutboxMessage(topic=topic_name(Topic.STEPS, self.environment),
                             key=f"{timer.tenant_id}:{timer.run_id or timer.timer_id}", envelope=envelope)

    async def run(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            try:
                report = await self.scan_once()
                if report.woken or report.timers_fired or report.resent:
                    log.info("scanner: woke %d steps, fired %d timers, re-sent %s", report.woken,
                             report.timers_fired, dict(report.resent) or "nothing")
            except TransientError as exc:
                log.warning("scanner: pass failed, will retry: %s", exc)
            await pause(stop, self.interval.total_seconds())


class ScannerRole:
    """``ira worker --role scanner``."""

    name = "scanner"

    def routers(self, platform: Platform) -> Sequence[APIRouter]:
        return ()

    async def run(self, platform: Platform, stop: asyncio.Event) -> None:
        from ira.runtime.wiring import build_scanner

        await build_scanner(platform).run(stop)


role = ScannerRole()
