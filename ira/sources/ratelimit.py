"""Per source instance rate limit, counted in Redis so it holds across every gateway replica.

A fixed window: the requests of one source in the current window are counted under a key
named by the window's index, which expires shortly after the window ends. A rate below one
per second widens the window so the limit stays a whole number (0.5/s -> one request per
2 s). A request counts once whether it carries one alert or a hundred: the limit protects
the gateway and the broker from a misbehaving sender, not the alert volume of a healthy one.

This module decides (which window, what limit, when to come back); the count itself is taken
by the edge script in :mod:`ira.sources.dedupe`, in the same Redis call as the dedupe marks,
so the limit costs no extra round trip and a refused request marks nothing.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime, timedelta

from ira.runtime.settings import SourceSettings
from ira.sources.errors import RateLimitedError


def window_of(rate_per_second: float) -> tuple[int, int]:
    """``(window_ms, limit)``: one second, or longer when the rate is below one per second."""
    window_ms = 1000 if rate_per_second >= 1 else math.ceil(1000 / rate_per_second)
    return window_ms, max(1, math.floor(rate_per_second * window_ms / 1000))


@dataclass(frozen=True)
class RateWindow:
    """The window one request is counted in."""

    source_id: str
    key: str
    """The Redis counter of this source and window."""
    limit: int
    window_ms: int
    ends_at_ms: int
    now_ms: int

    def check(self, count: int) -> None:
        """RateLimitedError (429) with Retry-After up to the window's end when over the limit."""
        if count > self.limit:
            wait = max(1, math.ceil((self.ends_at_ms - self.now_ms) / 1000))
            raise RateLimitedError(self.source_id, retry_after=timedelta(seconds=wait))


def rate_window(source: SourceSettings, now: datetime, *, key_prefix: str) -> RateWindow:
    """The window ``now`` falls in for ``source``; its counter is ``<key_prefix>rate:<index>``."""
    window_ms, limit = window_of(source.rate_limit_per_second)
    now_ms = int(now.timestamp() * 1000)
    index = now_ms // window_ms
    return RateWindow(source_id=source.id, key=f"{key_prefix}rate:{index}", limit=limit, window_ms=window_ms,
                      ends_at_ms=(index + 1) * window_ms, now_ms=now_ms)
