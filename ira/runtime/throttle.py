"""Failed-login throttling per client: after N failures in a window, 429 until the oldest ages out.

Kept in the process's memory: each replica throttles what it sees (a guesser spread over
replicas gets N per replica per window, still far from a useful guessing rate). Memory is
bounded: at most ``max_clients`` clients are tracked, the least recently failing dropped first.
"""

from __future__ import annotations

from collections import OrderedDict, deque
from datetime import datetime, timedelta

from ira.core.clock import Clock


class LoginThrottle:
    """Counts failures per client key (the peer address) in a sliding window."""

    def __init__(self, *, clock: Clock, failures: int = 10, window: timedelta = timedelta(minutes=1),
                 max_clients: int = 10_000) -> None:
        self._clock, self._failures, self._window, self._max = clock, failures, window, max_clients
        self._seen: OrderedDict[str, deque[datetime]] = OrderedDict()

    def retry_after(self, client: str) -> timedelta | None:
        """How long ``client`` must wait before its next try, or None if it may try now."""
        if client not in self._seen:
            return None
        recent = self._recent(client)
        if len(recent) < self._failures:
            return None
        oldest = recent[0]
        return max(timedelta(seconds=1), oldest + self._window - self._clock.now())

    def failed(self, client: str) -> None:
        self._recent(client).append(self._clock.now())
        self._seen.move_to_end(client)
        while len(self._seen) > self._max:
            self._seen.popitem(last=False)

    def _recent(self, client: str) -> deque[datetime]:
        found = self._seen.setdefault(client, deque(maxlen=self._failures))
        cutoff = self._clock.now() - self._window
        while found and found[0] <= cutoff:
            found.popleft()
        return found
