"""Who may post to a source: its bearer token, or an HMAC signature over the body.

Bearer (Alertmanager's ``http_config.authorization``, Grafana's contact point header)::

    Authorization: Bearer <the source's bearer_token>

HMAC (generic sources; the secret never travels)::

    X-Ira-Timestamp: <unix seconds>
    X-Ira-Signature: sha256=<hex HMAC-SHA256(secret, timestamp + "." + raw body)>

The timestamp is inside the signed bytes, so a captured request cannot be replayed with a
fresh one; a request older than five minutes (or more than five minutes in the future, a
sender with a wrong clock) is refused. Within the window a replay is just a duplicate the
edge dedupe drops. Every comparison is constant time, so timing never reveals a near match.
"""

from __future__ import annotations

import hashlib
import hmac
from dataclasses import dataclass
from datetime import datetime, timedelta

from ira.core.errors import AuthenticationError
from ira.runtime.settings import SourceSettings

TIMESTAMP_HEADER = "x-ira-timestamp"
SIGNATURE_HEADER = "x-ira-signature"
SIGNATURE_PREFIX = "sha256="
MAX_SKEW = timedelta(minutes=5)
_MAX_TIMESTAMP_DIGITS = 12


@dataclass(frozen=True)
class Credentials:
    """What the request presented (header values as received, None when absent)."""

    authorization: str | None = None
    timestamp: str | None = None
    signature: str | None = None


def sign(secret: str, timestamp: str, body: bytes) -> str:
    """The ``X-Ira-Signature`` value a sender computes (and ira recomputes)."""
    digest = hmac.new(secret.encode(), timestamp.encode() + b"." + body, hashlib.sha256).hexdigest()
    return f"{SIGNATURE_PREFIX}{digest}"


def authenticate(source: SourceSettings, credentials: Credentials, body: bytes, *, now: datetime,
                 max_skew: timedelta = MAX_SKEW) -> None:
    """Return if the request is the source's own; AuthenticationError (401) otherwise."""
    if source.bearer_token is not None:
        check_bearer(source.bearer_token.get_secret_value(), credentials.authorization)
    elif source.hmac_secret is not None:
        check_signature(source.hmac_secret.get_secret_value(), credentials, body, now=now, max_skew=max_skew)
    else:  # settings validation makes this unreachable; refuse rather than let anyone in
        raise AuthenticationError("the source has no credentials configured")


def check_bearer(expected: str, authorization: str | None) -> None:
    scheme, _, token = (authorization or "").partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise AuthenticationError("missing bearer token: send `Authorization: Bearer <source token>`")
    if not hmac.compare_digest(expected.encode(), token.strip().encode()):
        raise AuthenticationError("invalid bearer token for this source")


def check_signature(secret: str, credentials: Credentials, body: bytes, *, now: datetime,
                    max_skew: timedelta = MAX_SKEW) -> None:
    timestamp, presented = credentials.timestamp, credentials.signature
    if not timestamp or not presented:
        raise AuthenticationError("missing X-Ira-Timestamp or X-Ira-Signature header")
    if not (timestamp.isascii() and timestamp.isdigit() and len(timestamp) <= _MAX_TIMESTAMP_DIGITS):
        raise AuthenticationError("X-Ira-Timestamp must be unix seconds")
    if abs(now.timestamp() - int(timestamp)) > max_skew.total_seconds():
        raise AuthenticationError(f"X-Ira-Timestamp is more than {max_skew} away from now (replay or clock skew)")
    if not hmac.compare_digest(sign(secret, timestamp, body).encode(), presented.strip().encode()):
        raise AuthenticationError("invalid X-Ira-Signature")
