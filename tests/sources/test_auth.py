"""Source credentials: bearer tokens and HMAC signatures with a five minute replay window."""

from __future__ import annotations

import hashlib
import hmac
from datetime import UTC, datetime, timedelta

import pytest

from ira.core.errors import AuthenticationError
from ira.runtime.settings import SourceSettings
from ira.sources.auth import Credentials, authenticate, sign

NOW = datetime(2026, 4, 29, 10, 0, tzinfo=UTC)
BODY = b'{"id": "a"}'
HMAC_SOURCE = SourceSettings(id="generic", kind="generic", tenant="demo", hmac_secret="s3cret-s3cret")
BEARER_SOURCE = SourceSettings(id="am", kind="alertmanager", tenant="demo", bearer_token="t0ken-t0ken")


def signed_at(at: datetime, body: bytes = BODY, secret: str = "s3cret-s3cret") -> Credentials:
    timestamp = str(int(at.timestamp()))
    return Credentials(timestamp=timestamp, signature=sign(secret, timestamp, body))


def test_signature_is_hmac_sha256_over_timestamp_dot_body() -> None:
    expected = hmac.new(b"s3cret-s3cret", b'1777456800.{"id": "a"}', hashlib.sha256).hexdigest()
    assert sign("s3cret-s3cret", "1777456800", BODY) == f"sha256={expected}"


@pytest.mark.parametrize("offset", [timedelta(0), timedelta(minutes=-5), timedelta(minutes=5), timedelta(minutes=-4)])
def test_signatures_inside_five_minutes_either_way_are_accepted(offset: timedelta) -> None:
    authenticate(HMAC_SOURCE, signed_at(NOW + offset), BODY, now=NOW)


@pytest.mark.parametrize("offset", [timedelta(minutes=-5, seconds=-1), timedelta(minutes=5, seconds=1),
                                    timedelta(days=-1)])
def test_signatures_outside_five_minutes_are_refused(offset: timedelta) -> None:
    with pytest.raises(AuthenticationError, match="X-Ira-Timestamp"):
        authenticate(HMAC_SOURCE, signed_at(NOW + offset), BODY, now=NOW)


@pytest.mark.parametrize("credentials", [
    Credentials(),
    Credentials(timestamp=str(int(NOW.timestamp()))),
    signed_at(NOW, body=b'{"id": "b"}'),
    signed_at(NOW, secret="other-secret"),
    Credentials(timestamp="-1", signature="sha256=00"),
    Credentials(timestamp="1" * 40, signature="sha256=00"),
    Credentials(timestamp="١٧٧٧٤٥٦٨٠٠", signature="sha256=00"),  # unicode digits are not unix seconds
])
def test_bad_or_missing_signatures_are_refused(credentials: Credentials) -> None:
    with pytest.raises(AuthenticationError):
        authenticate(HMAC_SOURCE, credentials, BODY, now=NOW)


@pytest.mark.parametrize("authorization", ["Bearer t0ken-t0ken", "bearer t0ken-t0ken", "Bearer  t0ken-t0ken "])
def test_the_sources_bearer_token_is_accepted(authorization: str) -> None:
    authenticate(BEARER_SOURCE, Credentials(authorization=authorization), BODY, now=NOW)


@pytest.mark.parametrize("authorization", [None, "", "Bearer", "Bearer ", "t0ken-t0ken", "Token t0ken-t0ken",
                                           "Bearer t0ken-t0keN", "Bearer t0ken-t0ken-and-more", "Bearer ünï"])
def test_anything_but_the_sources_bearer_token_is_refused(authorization: str | None) -> None:
    with pytest.raises(AuthenticationError):
        authenticate(BEARER_SOURCE, Credentials(authorization=authorization), BODY, now=NOW)
