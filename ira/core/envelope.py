"""Message envelopes and topic names (DESIGN.md §5).

Every Kafka message is an :class:`Envelope` serialized as JSON. Receivers dedupe on
``message_id``; ``schema_version`` lets a consumer refuse what it cannot read (DLQ) instead
of guessing.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any

import orjson
from pydantic import AwareDatetime, Field, ValidationError

from ira.core.errors import InvalidMessageError
from ira.core.model import Model

SCHEMA_VERSION = 1


class Topic(StrEnum):
    ALERTS = "ira.alerts.v1"
    INCIDENTS = "ira.incidents.v1"
    """Triage's ``create_run`` decisions: few, and never queued behind another incident's updates."""
    INCIDENT_UPDATES = "ira.incident-updates.v1"
    """Triage's ``deliver`` decisions (follow-ups to a run): a storm's volume, on its own topic."""
    STEPS = "ira.steps.v1"
    RUN_EVENTS = "ira.run-events.v1"
    DELIVERIES = "ira.deliveries.v1"
    DLQ = "ira.dlq.v1"


PRODUCTION = "prod"


def topic_name(topic: Topic, environment: str) -> str:
    """The physical topic: production uses the bare name, any other environment a prefix."""
    return topic.value if environment == PRODUCTION else f"{environment}.{topic.value}"


class Envelope(Model):
    """One message on a topic."""

    message_id: str
    type: str
    """What the payload is, e.g. ``alert.received``, ``step.ready``."""
    schema_version: int = SCHEMA_VERSION
    tenant_id: str
    occurred_at: AwareDatetime
    traceparent: str | None = None
    payload: dict[str, Any] = Field(default_factory=dict)

    def to_bytes(self) -> bytes:
        """The same bytes as pydantic's ``model_dump_json`` (tests/core/test_envelope_bytes.py),
        through orjson at a fifth of the CPU: every record and outbox row is one of these
        (the webhook writes one per alert). A payload value orjson does not know (a model, a
        set, a non-string key, an int past 64 bits) takes pydantic's way."""
        try:
            return orjson.dumps({"message_id": self.message_id, "type": self.type,
                                 "schema_version": self.schema_version, "tenant_id": self.tenant_id,
                                 "occurred_at": self.occurred_at, "traceparent": self.traceparent,
                                 "payload": self.payload}, option=orjson.OPT_UTC_Z)
        except TypeError:
            return self.model_dump_json().encode()

    @classmethod
    def from_bytes(cls, raw: bytes | None) -> Envelope:
        """Parse a message value; anything unreadable is poison (InvalidMessageError)."""
        if not raw:
            raise InvalidMessageError("empty message value")
        try:
            envelope = cls.model_validate_json(raw)
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first["loc"]) or "value"
            raise InvalidMessageError(f"envelope {where}: {first['msg']}") from exc
        if envelope.schema_version > SCHEMA_VERSION:
            raise InvalidMessageError(f"schema_version {envelope.schema_version} is newer than {SCHEMA_VERSION}")
        return envelope


class DeadLetter(Model):
    """What lands on ``ira.dlq.v1``: the original bytes plus why they were refused."""

    reason: str
    error_code: str
    consumer: str
    original_topic: str
    original_partition: int
    original_offset: int
    original_message_id: str | None
    schema_version: int | None
    original_value: str
    """The original value, decoded as UTF-8 with replacement (poison may not be text)."""
