"""The ingest use-case: one webhook request in, its events on ``ira.alerts.v1``, or nothing.

authenticate -> parse and validate -> normalize -> rate limit + dedupe (one Redis call)
-> produce every fresh event concurrently and wait for every ack -> 202.

All or nothing per request: the answer is 202 only after the broker acknowledged every event
the request brought; if any produce fails, every dedupe mark the request set is released and
the sender gets 503 + Retry-After, so its retry is accepted rather than taken for a duplicate.
Events that were acknowledged before the failure are published again by that retry with the
same ``event_id`` (ids are deterministic), which triage's inbox drops.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from redis.asyncio import Redis

from ira.core.alert import ALERT_MESSAGE, CHANGE_MESSAGE, AlertEvent, ChangeEvent, SourceKind
from ira.core.clock import Clock
from ira.core.commit import OutboxMessage
from ira.core.envelope import Envelope
from ira.core.errors import NotFoundError
from ira.runtime.settings import SourceSettings
from ira.sources import alertmanager, change, generic, grafana
from ira.sources.auth import Credentials, authenticate
from ira.sources.context import SourceContext
from ira.sources.dedupe import DEFAULT_PREFIX, EdgeDedupe
from ira.sources.errors import EdgeUnavailableError
from ira.sources.ratelimit import rate_window

log = logging.getLogger(__name__)

Event = AlertEvent | ChangeEvent
Normalizer = Callable[[bytes, SourceContext], Sequence[Event]]
NORMALIZERS: Mapping[SourceKind, Normalizer] = {
    SourceKind.ALERTMANAGER: alertmanager.events,
    SourceKind.GRAFANA: grafana.events,
    SourceKind.GENERIC: generic.events,
    SourceKind.CHANGE: change.events,
}


class Publisher(Protocol):
    """Where events go: the platform's BusProducer (acks=all, BrokerUnavailableError on failure)."""

    async def publish_many(self, messages: Sequence[OutboxMessage]) -> Sequence[Any]: ...


@dataclass(frozen=True)
class IngestRequest:
    """One POST as the use-case sees it: path parameters, credentials, the raw body."""

    kind: str
    source_id: str
    body: bytes
    credentials: Credentials


@dataclass(frozen=True)
class IngestResult:
    """The 202 body. ``event_ids`` lists every event of the request in payload order, accepted
    or duplicate (a duplicate's id is the id of the copy accepted before it)."""

    accepted: int
    duplicates: int
    event_ids: list[str]

    def to_json(self) -> bytes:
        return json.dumps({"accepted": self.accepted, "duplicates": self.duplicates,
                           "event_ids": self.event_ids}).encode()


def event_message(topic: str, event: Event) -> OutboxMessage:
    """The envelope on ``ira.alerts.v1``: alerts keyed ``tenant:fingerprint``, changes ``tenant:service``."""
    if isinstance(event, AlertEvent):
        kind, key = ALERT_MESSAGE, f"{event.tenant_id}:{event.fingerprint}"
    else:
        kind, key = CHANGE_MESSAGE, f"{event.tenant_id}:{event.service}"
    envelope = Envelope(message_id=event.event_id, type=kind, tenant_id=event.tenant_id,
                        occurred_at=event.received_at, payload=event.model_dump(mode="json"))
    return OutboxMessage(topic=topic, key=key, envelope=envelope)


class Ingest:
    """Accepts webhook requests for the configured ``sources``; see the module docstring."""

    def __init__(self, *, sources: Sequence[SourceSettings], topic: str, redis: Redis, publisher: Publisher,
                 clock: Clock, redis_prefix: str = DEFAULT_PREFIX) -> None:
        self._sources = {source.id: source for source in sources}
        self._topic, self._redis, self._publisher, self._clock = topic, redis, publisher, clock
        self._dedupe = EdgeDedupe(redis, prefix=redis_prefix)

    def source(self, kind: str, source_id: str) -> SourceSettings:
        """The configured source; NotFoundError (404) if unknown or configured as another kind."""
        source = self._sources.get(source_id)
        if source is None or source.kind.value != kind:
            raise NotFoundError(f"no {kind} source {source_id!r}")
        return source

    def is_known(self, source_id: str) -> bool:
        return source_id in self._sources

    async def handle(self, request: IngestRequest) -> IngestResult:
        """Run the whole use-case; raises ira errors the route maps to 4xx/503."""
        source = self.source(request.kind, request.source_id)
        now = self._clock.now()
        authenticate(source, request.credentials, request.body, now=now)
        ctx = SourceContext(tenant_id=source.tenant, source_id=source.id, source_kind=source.kind,
                            received_at=now, default_environment=source.default_environment)
        events = NORMALIZERS[source.kind](request.body, ctx)
        keys = [self._dedupe.key(source.id, event.event_id) for event in events]
        rate = rate_window(source, now, key_prefix=self._dedupe.source_prefix(source.id))
        admission = await self._dedupe.admit(rate, keys, window=source.dedupe_window)
        rate.check(admission.count)
        fresh = [event for event, is_fresh in zip(events, admission.fresh, strict=True) if is_fresh]
        await self._publish(fresh, [key for key, is_fresh in zip(keys, admission.fresh, strict=True) if is_fresh])
        return IngestResult(accepted=len(fresh), duplicates=len(events) - len(fresh),
                            event_ids=[event.event_id for event in events])

    async def _publish(self, events: list[Event], marks: list[str]) -> None:
        """Produce all at once, wait for every ack; on any failure release every mark, re-raise."""
        if not events:
            return
        try:
            await self._produce(events)
        except BaseException:  # BrokerUnavailableError, or the request was cancelled mid-produce
            await self._release_quietly(marks)
            raise

    async def _produce(self, events: list[Event]) -> None:
        """Send every event, then wait for every ack (BusProducer adds the §5 headers and traceparent)."""
        await self._publisher.publish_many([event_message(self._topic, event) for event in events])

    async def _release_quietly(self, marks: list[str]) -> None:
        """Release marks without hiding the produce failure the caller is about to re-raise."""
        try:
            await self._dedupe.release(marks)
        except EdgeUnavailableError:
            log.error("could not release %d dedupe mark(s) after a failed produce: retries inside the "
                      "dedupe window will be taken for duplicates", len(marks))
