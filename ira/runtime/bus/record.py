"""One consumed record: what handlers get, what a failure means, what a dead letter holds.

Kept apart from the consumer loop so the decisions — retry, drop, dead-letter — are plain
functions that can be read (and tested) without a broker.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from enum import StrEnum
from typing import Any

from aiokafka.errors import KafkaError
from pydantic import ValidationError
from sqlalchemy.exc import (
    DataError,
    DBAPIError,
    DisconnectionError,
    InterfaceError,
    OperationalError,
    PendingRollbackError,
)
from sqlalchemy.ext.asyncio import AsyncConnection

from ira.core.envelope import DeadLetter, Envelope
from ira.core.errors import DuplicateMessageError, PlatformError, StaleEpochError, TransientError
from ira.runtime.store.refusal import is_refused_value

UNHANDLED = "unhandled_error"
# Infrastructure failures handlers should have translated but may not have: retry them like
# TransientError, since the same record will succeed once the database or broker is back.
_INFRASTRUCTURE = (OperationalError, InterfaceError, DisconnectionError, KafkaError, ConnectionError,
                   TimeoutError)


@dataclass(frozen=True)
class RecordMeta:
    """Where a record came from, for handlers that log, trace or key on it."""

    topic: str
    partition: int
    offset: int
    key: str | None
    headers: Mapping[str, str]
    timestamp_ms: int


@dataclass(frozen=True)
class RecordShape:
    """The fields of aiokafka's ConsumerRecord the runner reads, for a record that did not come
    straight from a fetch: a parked one (``park.StoredRecord``), a pack's member (``pack.Member``)."""

    topic: str
    partition: int
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes
    headers: tuple[tuple[str, bytes], ...]


def record_meta(record: Any) -> RecordMeta:
    """Build RecordMeta from an aiokafka ConsumerRecord (bytes decoded leniently)."""
    key = record.key.decode("utf-8", "replace") if record.key is not None else None
    headers: dict[str, str] = {}
    for name, value in record.headers or ():  # the first of repeated headers wins, as in OTel's propagator
        headers.setdefault(name, (value or b"").decode("utf-8", "replace"))
    return RecordMeta(topic=record.topic, partition=record.partition, offset=record.offset, key=key,
                      headers=headers, timestamp_ms=record.timestamp)


InboxHandler = Callable[[AsyncConnection, Envelope, RecordMeta], Awaitable[None]]
"""Applies one envelope inside the runner's transaction (the inbox row is in it too)."""

PlainHandler = Callable[[Envelope, RecordMeta], Awaitable[None]]
"""Applies one envelope on its own (``inbox=False``): it owns its transactions and dedupe."""


class Outcome(StrEnum):
    """What became of one record (or one try of it)."""

    PROCESSED = "processed"
    DUPLICATE = "duplicate"
    """Already applied: acknowledged and dropped."""
    STALE = "stale"
    """The handler lost its claim to a newer epoch: acknowledged, the new owner carries on."""
    DEAD_LETTERED = "dead_lettered"
    RETRIED = "retried"
    """One failed try of a record that will be tried again (counted per try)."""
    PARKED = "parked"
    """Failing for longer than ``max_hold``: out of the partition, into the store, tried again from there."""


@dataclass(frozen=True)
class RecordOutcome:
    """One outcome, as told to a consumer's ``on_outcome`` observer (telemetry counts these)."""

    consumer: str
    outcome: Outcome
    meta: RecordMeta
    error_code: str | None = None
    """Why it was dead-lettered or retried."""


class Disposition(StrEnum):
    """What the runner does with a record whose handler raised."""

    DROP_DUPLICATE = "drop_duplicate"
    DROP_STALE = "drop_stale"
    RETRY = "retry"
    DEAD_LETTER = "dead_letter"


_PERMANENT = (PlatformError, DataError, ValidationError, UnicodeError, json.JSONDecodeError)
"""Failures the same record meets again on every try: ira's own refusals (DomainError & co.),
a value the database refuses (too long for its column, a NUL), data that does not parse."""

def is_lost_connection(exc: BaseException) -> bool:
    """The database connection died under the handler (a restart, a failover, a terminated
    session): SQLAlchemy says so by invalidating it, and the transaction's end then raises
    PendingRollbackError. The next try gets a new connection."""
    return isinstance(exc, PendingRollbackError) or (isinstance(exc, DBAPIError) and exc.connection_invalidated)


def disposition(exc: BaseException, *, attempt: int, max_unexpected_attempts: int) -> Disposition:
    """What to do with a record whose handler raised ``exc`` on try number ``attempt`` (0-based).

    The one place that classifies failures; the error's class decides (CONVENTIONS "Errors"):

    ====================================================  =====================================
    DuplicateMessageError / StaleEpochError               dropped (acknowledged)
    TransientError, database / broker / network failures, retried (in place up to max_hold,
    a lost database connection                            then parked and retried from the store)
    other PlatformError, a value the database refuses     dead-lettered after this one try
    (DataError, SQLSTATE 22...), ValidationError,
    undecodable bytes or JSON
    anything else (a bug, an untranslated failure)        retried like a transient failure, then
                                                          dead-lettered at try
                                                          ``max_unexpected_attempts``
    ====================================================  =====================================
    """
    if isinstance(exc, DuplicateMessageError):
        return Disposition.DROP_DUPLICATE
    if isinstance(exc, StaleEpochError):
        return Disposition.DROP_STALE
    if isinstance(exc, (TransientError, *_INFRASTRUCTURE)) or is_lost_connection(exc):
        return Disposition.RETRY
    if isinstance(exc, _PERMANENT) or is_refused_value(exc):
        return Disposition.DEAD_LETTER  # refused again on every try: out of the partition now
    return Disposition.RETRY if attempt + 1 < max_unexpected_attempts else Disposition.DEAD_LETTER


def retry_delay(exc: BaseException, attempt: int, *, base: timedelta, cap: timedelta) -> timedelta:
    """Capped exponential backoff for try ``attempt``; a longer ``retry_after`` hint wins."""
    delay = min(cap, base * (2 ** min(attempt, 30)))
    hinted = exc.retry_after if isinstance(exc, TransientError) else None
    return max(delay, hinted) if hinted else delay


INVALID_DATA = "invalid_data"
"""A value the database refused (too long for its column, a NUL): deterministic, never retried."""


def error_code(exc: BaseException) -> str:
    if is_refused_value(exc):
        return INVALID_DATA
    return exc.code if isinstance(exc, PlatformError) else UNHANDLED


def _readable_message_id(value: bytes | None, headers: Mapping[str, str]) -> str | None:
    """The original ``message_id`` if any part of the poison still says it."""
    try:
        parsed = json.loads(value or b"")
    except ValueError:
        parsed = None
    if isinstance(parsed, dict) and isinstance(parsed.get("message_id"), str):
        return parsed["message_id"]
    return headers.get("event_id")


def dead_letter(
    value: bytes | None, meta: RecordMeta, exc: BaseException, *, consumer: str, envelope: Envelope | None
) -> DeadLetter:
    """The DLQ entry for a refused record: the reason plus everything needed to replay it."""
    reason = exc.message if isinstance(exc, PlatformError) else f"{type(exc).__name__}: {exc}"
    return DeadLetter(
        reason=reason, error_code=error_code(exc), consumer=consumer,
        original_topic=meta.topic, original_partition=meta.partition, original_offset=meta.offset,
        original_message_id=envelope.message_id if envelope else _readable_message_id(value, meta.headers),
        schema_version=envelope.schema_version if envelope else None,
        original_value=(value or b"").decode("utf-8", "replace"),
    )


def span_attributes(meta: RecordMeta, envelope: Envelope, *, group_id: str, consumer: str) -> dict[str, Any]:
    """OpenTelemetry messaging attributes of a consume span, plus ira's ids."""
    return {
        "messaging.system": "kafka", "messaging.destination.name": meta.topic,
        "messaging.consumer.group.name": group_id, "messaging.message.id": envelope.message_id,
        "messaging.kafka.partition": meta.partition, "messaging.kafka.offset": meta.offset,
        "ira.tenant_id": envelope.tenant_id, "ira.consumer": consumer,
    }


def dead_letter_headers(meta: RecordMeta, letter: DeadLetter) -> dict[str, str]:
    """Headers of a DLQ record: its own schema, the original ids and trace."""
    headers = {"schema": "dead_letter/v1", "error_code": letter.error_code, "consumer": letter.consumer}
    if letter.original_message_id:
        headers["event_id"] = letter.original_message_id
    for name in ("tenant_id", "traceparent"):
        if name in meta.headers:
            headers[name] = meta.headers[name]
    return headers


@dataclass
class ConsumerStats:
    """Counters of one consumer runner, read by telemetry and by tests."""

    processed: int = 0
    duplicates: int = 0
    stale: int = 0
    dead_lettered: int = 0
    retries: int = 0
    parked: int = 0
    commit_failures: int = 0
    committed: dict[tuple[str, int], int] = field(default_factory=dict)
    """Next offset committed per (topic, partition)."""

    def count(self, outcome: Outcome) -> None:
        attribute = {Outcome.PROCESSED: "processed", Outcome.DUPLICATE: "duplicates", Outcome.STALE: "stale",
                     Outcome.DEAD_LETTERED: "dead_lettered", Outcome.RETRIED: "retries",
                     Outcome.PARKED: "parked"}[outcome]
        setattr(self, attribute, getattr(self, attribute) + 1)
