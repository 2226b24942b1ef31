"""The signed webhook channel.

Every POST carries the notification as JSON (with ``notification_id`` and ``run_version``,
so a receiver can dedupe and order) and two headers::

    X-Ira-Timestamp: <unix seconds>
    X-Ira-Signature: sha256=<hex HMAC-SHA256(secret, "<timestamp>." + body)>

Receivers check the signature and reject stale timestamps (replays). A 2xx is ``accepted``:
a webhook cannot prove a person saw it. A timeout after the request may have left is
``unknown``; it is retried with the same ``notification_id``, which receivers dedupe on.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Mapping
from datetime import timedelta

import httpx

from ira.core.clock import Clock
from ira.core.delivery import Notification, Receipt
from ira.core.states import DeliveryState

SIGNATURE_HEADER = "X-Ira-Signature"
TIMESTAMP_HEADER = "X-Ira-Timestamp"
_RETRYABLE_STATUSES = frozenset({408, 425, 429})


def sign(secret: str, timestamp: str, body: bytes) -> str:
    digest = hmac.new(secret.encode(), timestamp.encode() + b"." + body, hashlib.sha256).hexdigest()
    return f"sha256={digest}"


def verify_signature(secret: str, headers: Mapping[str, str], body: bytes, *, now: float,
                     tolerance: timedelta = timedelta(minutes=5)) -> bool:
    """What a receiver does: constant-time compare, and a timestamp inside the tolerance."""
    timestamp = headers.get(TIMESTAMP_HEADER.lower()) or headers.get(TIMESTAMP_HEADER) or ""
    signature = headers.get(SIGNATURE_HEADER.lower()) or headers.get(SIGNATURE_HEADER) or ""
    if not timestamp.isdigit() or abs(now - int(timestamp)) > tolerance.total_seconds():
        return False
    return hmac.compare_digest(sign(secret, timestamp, body), signature)


class WebhookChannel:
    """POSTs notifications to one URL; ``client`` is injected (and closed by its owner)."""

    name = "webhook"

    def __init__(self, url: str, secret: str, client: httpx.AsyncClient, *, clock: Clock,
                 timeout: timedelta = timedelta(seconds=5)) -> None:
        self._url, self._secret, self._client, self._clock, self._timeout = url, secret, client, clock, timeout

    async def send(self, notification: Notification, *, attempt: int = 0) -> tuple[Receipt, bool]:
        """One attempt: the receipt, and whether another attempt may help."""
        body = notification.model_dump_json().encode()
        timestamp = str(int(self._clock.now().timestamp()))
        headers = {"content-type": "application/json", TIMESTAMP_HEADER: timestamp,
                   SIGNATURE_HEADER: sign(self._secret, timestamp, body)}
        try:
            response = await self._client.post(self._url, content=body, headers=headers,
                                               timeout=self._timeout.total_seconds())
        except httpx.ConnectError as exc:  # nothing reached the receiver
            return self._receipt(DeliveryState.FAILED, error=type(exc).__name__), True
        except httpx.TransportError as exc:  # it may have arrived: only the receiver knows
            return self._receipt(DeliveryState.UNKNOWN, error=type(exc).__name__), True
        status = response.status_code
        if 200 <= status < 300:
            return self._receipt(DeliveryState.ACCEPTED, status=status), False
        retry = status >= 500 or status in _RETRYABLE_STATUSES
        return self._receipt(DeliveryState.FAILED, status=status), retry

    def _receipt(self, state: DeliveryState, **detail: object) -> Receipt:
        return Receipt(at=self._clock.now(), state=state, detail={"channel": self.name, **detail})


class NoChannel:
    """No channel configured: nothing can be sent, which is a definite failure, not unknown."""

    name = "none"

    def __init__(self, clock: Clock) -> None:
        self._clock = clock

    async def send(self, notification: Notification, *, attempt: int = 0) -> tuple[Receipt, bool]:
        return Receipt(at=self._clock.now(), state=DeliveryState.FAILED,
                       detail={"reason": "no channel configured"}), False
