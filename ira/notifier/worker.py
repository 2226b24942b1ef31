"""The delivery worker: one ``delivery.requested`` at a time, bounded retries, receipts.

Reads the committed notification by ``notification_id`` (never recomputes it), sends it
through the channel, and appends every attempt's receipt to the delivery row. The final
state is ``accepted`` once the channel took it, ``failed`` when it said no (or no channel
exists), ``unknown`` when the last word was a timeout. Nothing here writes to a run: a
failed notification never changes a run's result.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from datetime import timedelta
from typing import Any, Protocol

from opentelemetry import trace
from opentelemetry.trace import SpanKind, Status, StatusCode

from ira.core.clock import Clock
from ira.core.delivery import DELIVERIES_INBOX, DELIVERY_REQUESTED, Notification, Receipt
from ira.core.envelope import PRODUCTION, Envelope, Topic, topic_name
from ira.core.states import DeliveryState
from ira.notifier import store
from ira.runtime.bus.consumer import ConsumerRunner, ConsumerSettings
from ira.runtime.bus.inbox import record_inbox_many
from ira.runtime.bus.producer import BusProducer
from ira.runtime.bus.record import RecordMeta, RecordOutcome
from ira.runtime.fault import FaultPoints
from ira.runtime.store.database import Database
from ira.runtime.store.parked import ParkSummary

log = logging.getLogger(__name__)
_tracer = trace.get_tracer(__name__)

AFTER_SEND = "delivery.after_send"
"""Fault point: the channel answered, its receipt is not stored yet (mid-delivery)."""


class Channel(Protocol):
    name: str

    async def send(self, notification: Notification, *, attempt: int = 0) -> tuple[Receipt, bool]:
        """Attempt number ``attempt`` (0-based): the receipt and whether retrying may help."""
        ...


class Notifier:
    """Delivers one notification with up to ``max_attempts`` tries (counted across restarts)."""

    def __init__(self, db: Database, channel: Channel, clock: Clock, *, max_attempts: int = 4,
                 backoff: timedelta = timedelta(milliseconds=200), faults: FaultPoints | None = None,
                 others: Sequence[Channel] = ()) -> None:
        """``channel`` sends every delivery unless one of ``others`` is named on its row."""
        self._db, self._channel, self._clock = db, channel, clock
        self._others = {c.name: c for c in others}
        self._max_attempts, self._backoff = max_attempts, backoff
        self._faults = faults or FaultPoints()

    async def handle(self, envelope: Envelope, meta: RecordMeta | None = None) -> str | None:
        """Deliver the notification the envelope names; None for other message types."""
        if envelope.type != DELIVERY_REQUESTED:
            return None
        async with self._db.reader() as conn:
            row, notification = await store.load(conn, envelope.tenant_id, str(envelope.payload["notification_id"]))
        while row["state"] == DeliveryState.PENDING:
            row = await self._attempt(row, notification, request=envelope.message_id)
        return str(row["state"])

    async def _attempt(self, row: dict[str, Any], notification: Notification, *, request: str) -> dict[str, Any]:
        """One try and its receipt; the first also puts ``request`` (the message id) in the
        notifier's inbox, which tells the scanner this request needs no re-send."""
        if row["attempts"]:
            await asyncio.sleep(self._wait(row))
        channel = self._others.get(row["channel"], self._channel)
        with _tracer.start_as_current_span(f"deliver {channel.name}", kind=SpanKind.CLIENT, attributes={
                "ira.notification_id": row["notification_id"], "ira.run_id": str(row.get("run_id") or ""),
                "ira.delivery.channel": channel.name, "ira.delivery.kind": str(notification.kind),
                "ira.delivery.attempt": row["attempts"] + 1}) as span:
            receipt, retry = await channel.send(notification, attempt=row["attempts"])
            span.set_attribute("ira.delivery.receipt", receipt.state.value)
            if receipt.state in (DeliveryState.FAILED, DeliveryState.UNKNOWN):
                span.set_status(Status(StatusCode.ERROR, receipt.state.value))  # no detail: it may quote a URL
        self._faults.hit(AFTER_SEND)
        last = not retry or row["attempts"] + 1 >= self._max_attempts or receipt.state == DeliveryState.ACCEPTED
        final = _final(row, receipt) if last else None
        async with self._db.transaction() as conn:
            if not row["attempts"]:
                await record_inbox_many(conn, consumer=DELIVERIES_INBOX, keys=[(row["tenant_id"], request)],
                                        at=self._clock.now())
            row = await store.record_attempt(conn, row, receipt, final=final, at=self._clock.now())
        log.info("delivery %s attempt %d: %s", row["notification_id"], row["attempts"], receipt.state.value)
        return row


    def _wait(self, row: dict[str, Any]) -> float:
        """The channel's Retry-After when it gave one (Slack's 429), else doubling backoff."""
        told = row["receipts"][-1]["detail"].get("retry_after") if row["receipts"] else None
        if told is not None:
            return float(told)
        return self._backoff.total_seconds() * 2 ** (row["attempts"] - 1)


def _final(row: dict[str, Any], receipt: Receipt) -> DeliveryState:
    """Accepted wins; an unknown outcome anywhere stays unknown; else it failed."""
    if receipt.state == DeliveryState.ACCEPTED:
        return DeliveryState.ACCEPTED
    seen = {r["state"] for r in row["receipts"]} | {receipt.state.value}
    return DeliveryState.UNKNOWN if DeliveryState.UNKNOWN.value in seen else DeliveryState.FAILED


def notifier_consumer(
    notifier: Notifier, *, bootstrap: str, producer: BusProducer, environment: str,
    settings: ConsumerSettings = ConsumerSettings(), group_suffix: str = "",
    on_outcome: Callable[[RecordOutcome], None] | None = None,
    on_lag: Callable[[dict[tuple[str, int], int]], None] | None = None,
    db: Database | None = None, on_parked: Callable[[ParkSummary], None] | None = None,
) -> ConsumerRunner:
    """The notifier's consumer of ``ira.deliveries.v1``: the delivery row is the dedupe, so the
    consumer keeps no inbox (the first attempt writes the one the scanner reads)."""
    prefix = "" if environment == PRODUCTION else f"{environment}."

    async def handle(envelope: Envelope, meta: RecordMeta) -> None:
        await notifier.handle(envelope, meta)

    return ConsumerRunner(
        bootstrap=bootstrap, group_id=f"{prefix}ira.notifier{group_suffix}",
        topics=[topic_name(Topic.DELIVERIES, environment)], name=DELIVERIES_INBOX, handler=handle, producer=producer,
        dlq_topic=topic_name(Topic.DLQ, environment), db=db, inbox=False, settings=settings,
        on_outcome=on_outcome, on_lag=on_lag, on_parked=on_parked)
