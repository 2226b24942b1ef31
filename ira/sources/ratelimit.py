"""Per source instance limits, counted in Redis so they hold across every gateway replica.

Requests: a fixed window. The requests of one source in the current window are counted under
a key named by the window's index, which expires shortly after the window ends. A rate below
one per second widens the window so the limit stays a whole number (0.5/s -> one request per
2 s). A request counts once whether it carries one alert or a hundred.

Alerts: counting requests alone let one 1 MB request bring 10,000 alerts. So a request may
carry at most ``max_alerts_per_request`` (checked before Redis: 413), and the alerts of a
source and tenant are counted in a token bucket refilled at ``alerts_per_second`` and holding
``max(alerts_per_second, max_alerts_per_request)`` (so any allowed request fits a full
bucket). A request the bucket cannot cover whole takes nothing from it and is refused with
429 + Retry-After (when enough tokens will be there): all or nothing, like the rest of ingest.

This module decides (which window, what limit, when to come back); the count itself is taken
by the edge script in :mod:`ira.sources.dedupe`, in the same Redis call as the dedupe marks,
so the limit costs no extra round trip and a refused request marks nothing.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime, timedelta

from ira.runtime.settings import SourceSettings
from ira.runtime.settings.ingest import IngestSettings
from ira.sources.errors import AlertRateLimitedError, RateLimitedError, TooManyAlertsError


def window_of(rate_per_second: float) -> tuple[int, int]:
    """``(window_ms, limit)``: one second, or longer when the rate is below one per second."""
    window_ms = 1000 if rate_per_second >= 1 else math.ceil(1000 / rate_per_second)
    return window_ms, max(1, math.floor(rate_per_second * window_ms / 1000))


@dataclass(frozen=True)
class AlertBucket:
    """A source's alert token bucket (per tenant): its key, refill rate and size."""

    key: str
    per_second: float
    capacity: int


@dataclass(frozen=True)
class AlertLimits:
    """A source's alert limits: its own settings, else the ``ingest:`` defaults."""

    source_id: str
    max_per_request: int
    per_second: float

    @classmethod
    def of(cls, source: SourceSettings, defaults: IngestSettings) -> AlertLimits:
        return cls(source_id=source.id,
                   max_per_request=source.max_alerts_per_request or defaults.max_alerts_per_request,
                   per_second=source.alerts_per_second or defaults.alerts_per_second)

    @property
    def capacity(self) -> int:
        return max(math.ceil(self.per_second), self.max_per_request)

    def check_request(self, count: int) -> None:
        """TooManyAlertsError (413) past ``max_per_request``: refused before anything is counted."""
        if count > self.max_per_request:
            raise TooManyAlertsError(self.source_id, count=count, limit=self.max_per_request)


@dataclass(frozen=True)
class RateWindow:
    """The window one request is counted in, and the alert bucket its alerts are taken from."""

    source_id: str
    key: str
    """The Redis counter of this source and window."""
    limit: int
    window_ms: int
    ends_at_ms: int
    now_ms: int
    alerts: AlertBucket | None = None
    """None: alerts are not counted (only the request is)."""

    def check(self, count: int, *, alerts: int = 0, alert_wait_ms: int = 0) -> None:
        """RateLimitedError (429) with Retry-After up to the window's end when over the request
        limit; AlertRateLimitedError (429) with Retry-After when the alert bucket refused."""
        if count > self.limit:
            wait = max(1, math.ceil((self.ends_at_ms - self.now_ms) / 1000))
            raise RateLimitedError(self.source_id, retry_after=timedelta(seconds=wait))
        if alert_wait_ms > 0 and self.alerts is not None:
            raise AlertRateLimitedError(self.source_id, alerts=alerts, limit=self.alerts.per_second,
                                        retry_after=timedelta(seconds=max(1, math.ceil(alert_wait_ms / 1000))))


def rate_window(source: SourceSettings, now: datetime, *, key_prefix: str,
                alerts: AlertLimits | None = None) -> RateWindow:
    """The window ``now`` falls in for ``source``; its counter is ``<key_prefix>rate:<index>``,
    its alert bucket ``<key_prefix>alerts:<tenant>``."""
    window_ms, limit = window_of(source.rate_limit_per_second)
    now_ms = int(now.timestamp() * 1000)
    index = now_ms // window_ms
    bucket = None if alerts is None else AlertBucket(
        key=f"{key_prefix}alerts:{source.tenant}", per_second=alerts.per_second, capacity=alerts.capacity)
    return RateWindow(source_id=source.id, key=f"{key_prefix}rate:{index}", limit=limit, window_ms=window_ms,
                      ends_at_ms=(index + 1) * window_ms, now_ms=now_ms, alerts=bucket)
