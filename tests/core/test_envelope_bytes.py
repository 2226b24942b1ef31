"""``Envelope.to_bytes`` writes what pydantic's ``model_dump_json`` writes, byte for byte.

It goes through orjson (the webhook writes an envelope per alert); consumers, the outbox and
anything that compares stored values must not see a difference, whatever the payload holds.
"""

from __future__ import annotations

import enum
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel
from pydantic_core import PydanticSerializationError

from ira.core.alert import AlertEvent, AlertStatus, Severity, SourceKind
from ira.core.envelope import Envelope


class Colour(enum.StrEnum):
    RED = "red"


class Point(BaseModel):
    x: int


JSON = st.recursive(
    st.none() | st.booleans() | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=True, allow_infinity=True) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12)
ZONES = st.sampled_from([UTC, timezone(timedelta(hours=2)), timezone(-timedelta(minutes=90))])
INSTANTS = st.datetimes(min_value=datetime(1, 1, 2), max_value=datetime(9999, 12, 30), timezones=ZONES)


def envelope(payload: dict[str, Any], occurred_at: datetime, traceparent: str | None = None) -> Envelope:
    return Envelope(message_id="m-1", type="alert.received", tenant_id="acme", occurred_at=occurred_at,
                    traceparent=traceparent, payload=payload)


@settings(max_examples=300, deadline=None)
@given(payload=st.dictionaries(st.text(max_size=10), JSON, max_size=6), occurred_at=INSTANTS,
       traceparent=st.none() | st.text(max_size=60))
def test_any_json_payload_is_written_as_pydantic_writes_it(payload: dict[str, Any], occurred_at: datetime,
                                                            traceparent: str | None) -> None:
    env = envelope(payload, occurred_at, traceparent)
    assert env.to_bytes() == env.model_dump_json().encode()


@settings(max_examples=100, deadline=None)
@given(instant=st.datetimes(min_value=datetime(1, 1, 2), max_value=datetime(9999, 12, 30)) | INSTANTS)
def test_datetimes_in_the_payload_are_written_as_pydantic_writes_them(instant: datetime) -> None:
    env = envelope({"at": instant, "when": [instant]}, datetime(2026, 4, 29, tzinfo=UTC))
    assert env.to_bytes() == env.model_dump_json().encode()


def test_values_orjson_does_not_know_take_pydantics_way() -> None:
    for payload in ({"model": Point(x=1)}, {"set": {1}}, {"keys": {1: "a"}}, {"big": 2**80}, {"enum": Colour.RED},
                    {"tuple": (1, "a")}, {"bytes": b"ab"}):
        env = envelope(payload, datetime(2026, 4, 29, tzinfo=UTC))
        assert env.to_bytes() == env.model_dump_json().encode(), payload


def test_what_pydantic_cannot_write_fails_as_it_did() -> None:
    env = envelope({"surrogate": "\ud800"}, datetime(2026, 4, 29, tzinfo=UTC))
    with pytest.raises(PydanticSerializationError):
        env.to_bytes()


def test_an_alert_message_is_written_as_pydantic_writes_it() -> None:
    received = datetime(2026, 4, 29, 10, 0, 0, 123456, tzinfo=UTC)
    alert = AlertEvent(event_id="e", tenant_id="acme", source_id="am", source_kind=SourceKind.ALERTMANAGER,
                       source_event_id="s", fingerprint="f", status=AlertStatus.FIRING, name="HighErrorRate",
                       severity=Severity.CRITICAL, labels={"service": "checkout", "é": "\x01"},
                       annotations={"summary": "5xx"}, starts_at=received - timedelta(minutes=1), received_at=received)
    env = envelope(alert.model_dump(mode="json"), received, "00-" + "1" * 32 + "-" + "2" * 16 + "-01")
    assert env.to_bytes() == env.model_dump_json().encode()
    assert Envelope.from_bytes(env.to_bytes()) == env
