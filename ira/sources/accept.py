"""Where a webhook request's events become safe, and so when the answer may be 202 (``ingest.ack``).

* :class:`StoreAcceptance` (``store``, the default): the events are committed to the store's
  outbox, in a transaction shared with the requests arriving together
  (:class:`~ira.runtime.store.group_commit.GroupCommit`); the relay publishes them to
  ``ira.alerts.v1`` afterwards, with the same key, headers and event id, and the scanner
  re-sends any that triage has not applied after ``runtime.resend_after``. A stop, a crash or
  a broker that forgets after the 202 loses nothing. Dedupe marks are set only after the commit
  (asked for before the 202, which does not wait for Redis to set them).
* :class:`BrokerAcceptance` (``broker``): the events are produced and every ack awaited; only
  durable with an external Kafka that replicates (the producer always asks for ``acks=all``).
  Marks are claimed first and released when the produce fails.

Either way: all or nothing per request. A failure is 503 + Retry-After with no mark left
behind for an event that is not safe, so the sender's retry is accepted, not taken for a
duplicate.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from datetime import timedelta
from typing import Protocol

from opentelemetry import trace

from ira.core.alert import AlertEvent, ChangeEvent
from ira.core.commit import OutboxMessage
from ira.runtime.bus.tracing import traceparent
from ira.runtime.fault import FaultPoints
from ira.runtime.store.outbox import MessageKey
from ira.sources.dedupe import CHECK, CLAIM, EdgeDedupe
from ira.sources.errors import EdgeUnavailableError
from ira.sources.message import event_message
from ira.sources.ratelimit import RateWindow

log = logging.getLogger(__name__)

Event = AlertEvent | ChangeEvent

AFTER_COMMIT = "ingest.after_commit"
"""Fault point: the request's events are committed to the outbox, the 202 is not sent yet."""


class Publisher(Protocol):
    """Where events go in broker mode: the platform's BusProducer (acks=all, BrokerUnavailableError)."""

    async def publish_many(self, messages: Sequence[OutboxMessage]) -> Sequence[object]: ...


class Outbox(Protocol):
    """Where events go in store mode: GroupCommit (StoreUnavailableError when the store fails)."""

    async def enqueue_new(self, messages: Sequence[OutboxMessage]) -> set[MessageKey]: ...


class Acceptance(Protocol):
    """Makes a request's events safe; returns, per event, whether this request accepted it
    (False: a duplicate). Raises RateLimitedError, EdgeUnavailableError or a TransientError
    of the commit point; then nothing of the request is marked."""

    async def accept(self, rate: RateWindow, events: Sequence[Event], keys: Sequence[str], *,
                     window: timedelta) -> list[bool]: ...


class StoreAcceptance:
    """``ingest.ack: store``: the outbox commit is the commit point (module docstring)."""

    def __init__(self, *, dedupe: EdgeDedupe, outbox: Outbox, topic: str, faults: FaultPoints,
                 urgent: Callable[[Event], bool] = lambda _event: False) -> None:
        """``urgent``: whether triage takes an event ahead of a backlog (:mod:`ira.sources.urgent`)."""
        self._dedupe, self._outbox, self._topic, self._faults = dedupe, outbox, topic, faults
        self._urgent = urgent

    async def accept(self, rate: RateWindow, events: Sequence[Event], keys: Sequence[str], *,
                     window: timedelta) -> list[bool]:
        admission = await self._dedupe.admit(rate, keys, window=window, op=CHECK)
        admission.check(rate)
        unmarked = [i for i, fresh in enumerate(admission.fresh) if fresh]
        accepted = [False] * len(events)
        if not unmarked:
            return accepted
        parent = traceparent(trace.get_current_span().get_span_context())  # the relayed record continues it
        written = await self._outbox.enqueue_new(
            [event_message(self._topic, events[i], traceparent=parent, urgent=self._urgent(events[i]))
             for i in unmarked])
        self._faults.hit(AFTER_COMMIT)
        for i in unmarked:
            key = (events[i].tenant_id, events[i].event_id)
            accepted[i] = key in written
            written.discard(key)  # a second copy in the same request is a duplicate
        # Every one of these is durable now (written here or before). The answer does not wait
        # for the marks: one that cannot be set only costs the next copy a trip to the store.
        self._dedupe.mark(rate, [keys[i] for i in unmarked], window=window)
        return accepted


class BrokerAcceptance:
    """``ingest.ack: broker``: the broker's ack is the commit point (module docstring)."""

    def __init__(self, *, dedupe: EdgeDedupe, publisher: Publisher, topic: str) -> None:
        self._dedupe, self._publisher, self._topic = dedupe, publisher, topic

    async def accept(self, rate: RateWindow, events: Sequence[Event], keys: Sequence[str], *,
                     window: timedelta) -> list[bool]:
        admission = await self._dedupe.admit(rate, keys, window=window, op=CLAIM)
        admission.check(rate)
        fresh = [event for event, is_fresh in zip(events, admission.fresh, strict=True) if is_fresh]
        if fresh:
            await self._publish(fresh, [key for key, is_fresh in zip(keys, admission.fresh, strict=True) if is_fresh])
        return list(admission.fresh)

    async def _publish(self, events: list[Event], marks: list[str]) -> None:
        """Produce all at once, wait for every ack; on any failure release every mark, re-raise."""
        try:
            await self._publisher.publish_many([event_message(self._topic, event) for event in events])
        except BaseException:  # BrokerUnavailableError, or the request was cancelled mid-produce
            await self._release_quietly(marks)
            raise

    async def _release_quietly(self, marks: list[str]) -> None:
        """Release marks without hiding the produce failure the caller is about to re-raise."""
        try:
            await self._dedupe.release(marks)
        except EdgeUnavailableError:
            log.error("could not release %d dedupe mark(s) after a failed produce: retries inside the "
                      "dedupe window will be taken for duplicates", len(marks))
