"""The outbox relay (C2): publish what committed transactions promised, at least once.

Claim a batch (a lease: one statement per lane, each atomic alone), publish it, mark it sent
(one statement). If the process dies between publish and mark, the claim expires and another
relay publishes again; the receivers' inboxes drop the duplicate. Safe with any number of
replicas. On PostgreSQL the statements run without a transaction around them
(``Database.standalone``): a pass was six round trips, it is two.

An idle relay polls every ``poll_interval`` for rows any process wrote, and is woken at once
by a commit of its own process that left a row to relay (``Database.waking_relay``), or of
another process through the doorbell (:mod:`ira.runtime.doorbell`): a notification a step asked
for goes out right after its commit instead of up to a poll later, and an idle relay's polls can
stay sparse.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from ira.core.clock import Clock
from ira.core.errors import TransientError
from ira.core.ports import RawPublisher, RawRecord, TopicAdmin
from ira.runtime.duty import enlist
from ira.runtime.fault import FaultPoints
from ira.runtime.pause import pause
from ira.runtime.store import outbox
from ira.runtime.store.database import Database

if TYPE_CHECKING:
    from fastapi import APIRouter

    from ira.runtime.platform import Platform

log = logging.getLogger(__name__)

#: Die after the broker acknowledged a batch and before it is marked sent (fault tests).
AFTER_PUBLISH = "relay.after_publish"


@dataclass
class RelayStats:
    published: int = 0
    failed: int = 0
    batches: int = 0


@dataclass
class OutboxRelay:
    db: Database
    publisher: RawPublisher
    clock: Clock
    relay_id: str = field(default_factory=lambda: f"relay-{socket.gethostname()}-{os.getpid()}")
    lease: timedelta = timedelta(seconds=15)
    batch_size: int = 200
    poll_interval: timedelta = timedelta(milliseconds=100)
    faults: FaultPoints = field(default_factory=FaultPoints)
    admin: TopicAdmin | None = None
    stats: RelayStats = field(default_factory=RelayStats)
    on_published: Callable[[int], None] = lambda _n: None
    lanes: Sequence[Sequence[str]] = ()
    """Topics in priority order (``outbox.claim_batch``): latency-critical ones before bulk ones."""
    pack: frozenset[str] = frozenset()
    """Topics whose rows go out several to a Kafka record (:mod:`ira.runtime.bus.pack`): the alerts."""

    found: bool = True
    """Whether the last pass claimed anything. After an empty one, the next pass first asks a
    reader (``outbox.any_claimable``) and takes the write transaction only when there is work."""
    woken: asyncio.Event = field(default_factory=asyncio.Event)
    """Set by a commit of this process that left a row to relay (or by the stop): ends the idle pause."""
    bell: Callable[[Callable[[], None]], Coroutine[Any, Any, None]] | None = None
    """Hears the commits of other processes (:mod:`ira.runtime.doorbell`): called with the wake
    while the relay runs, cancelled at its end."""

    async def relay_once(self) -> int:
        """Publish one batch; returns how many rows were marked sent."""
        if self.woken.is_set():  # a commit of this process left a row: no need to ask first
            self.woken.clear()
            self.found = True
        if not self.found:
            async with self.db.reader() as conn:
                if not await outbox.any_claimable(conn, now=self.clock.now()):
                    return 0
        async with self.db.standalone() as conn:  # each lane's lease one statement, atomic alone
            rows = await outbox.claim_batch(conn, relay_id=self.relay_id, now=self.clock.now(),
                                            lease=self.lease, limit=self.batch_size, lanes=self.lanes)
        self.found = bool(rows)
        if not rows:
            return 0
        results = await self.publisher.publish_raw_many(
            [RawRecord(topic=r.topic, key=r.key, value=r.value, headers=r.headers) for r in rows], pack=self.pack)
        self.faults.hit(AFTER_PUBLISH)
        sent = [r.id for r, res in zip(rows, results, strict=True) if not isinstance(res, BaseException)]
        async with self.db.standalone() as conn:
            marked = await outbox.mark_sent(conn, relay_id=self.relay_id, ids=sent, at=self.clock.now())
        self.on_published(marked)
        self._count(marked, results)
        return marked

    def _count(self, marked: int, results: Sequence[object]) -> None:
        self.stats.batches += 1
        self.stats.published += marked
        errors = [r for r in results if isinstance(r, BaseException)]
        self.stats.failed += len(errors)
        if errors:
            non_transient = [e for e in errors if not isinstance(e, TransientError)]
            raise (non_transient or errors)[0]

    async def run(self, stop: asyncio.Event) -> None:
        """Relay until ``stop``; on broker trouble back off and re-create missing topics.

        Ready at once; idle (for a draining stop) when a pass found nothing to publish.
        """
        backoff = 0.2
        duty = enlist("relay")
        duty.ready = True
        stopping = asyncio.create_task(self._wake_on(stop))
        heard = asyncio.create_task(self.bell(self.woken.set), name="relay-doorbell") if self.bell else None
        try:
            with self.db.waking_relay(self.woken.set):
                while not stop.is_set():
                    try:
                        moved = await self.relay_once()
                        duty.report(idle=moved == 0, done=moved)
                        backoff = 0.2
                    except TransientError as exc:
                        duty.report(idle=False)
                        log.warning("relay: publish failed, retrying in %.1fs: %s", backoff, exc)
                        await pause(stop, backoff)
                        backoff = min(backoff * 2, 5.0)
                        await self._recreate_topics()
                        continue
                    if moved == 0:
                        await self._rest()
        finally:
            stopping.cancel()
            if heard is not None:  # a doorbell that failed on its own only cost its wake-ups
                heard.cancel()
                await asyncio.gather(heard, return_exceptions=True)
        duty.finished = True

    async def _rest(self) -> None:
        """An idle pause: until the next poll, a commit of this process that left a row, or the stop."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(self.poll_interval.total_seconds()):
                await self.woken.wait()

    async def _wake_on(self, stop: asyncio.Event) -> None:
        await stop.wait()
        self.woken.set()

    async def _recreate_topics(self) -> None:
        if self.admin is None:
            return
        try:
            await self.admin.ensure_topics()
        except TransientError as exc:
            log.warning("relay: could not ensure topics: %s", exc)


RELAY_ROLE = "relay"


class RelayRole:
    """``ira worker --role relay``."""

    name = RELAY_ROLE

    def routers(self, platform: Platform) -> Sequence[APIRouter]:
        return ()

    async def run(self, platform: Platform, stop: asyncio.Event) -> None:
        from ira.runtime.wiring import build_relay

        await build_relay(platform).run(stop)


role = RelayRole()
