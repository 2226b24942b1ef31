"""Edge dedupe: the first request to carry an alert state wins; every copy inside the window
is answered "duplicate" without touching the broker.

One mark per event, ``SET <mark> 1 NX PX <window>``: NX makes the claim atomic across
gateway replicas (1,000 concurrent copies -> exactly one winner), PX lets it lapse on its
own. All marks of a request are set in ONE Redis call: a small server-side script that also
counts the request against its source's rate window (:mod:`ira.sources.ratelimit`) and
marks nothing when the source is over its rate. One command instead of a pipeline of N+2 is
what keeps a 100-alert request cheap (redis-py spends ~30 µs of CPU per pipelined command;
the script costs about one ``SET``), and a refused request leaves no mark to clean up.

A mark promises "this state is on the bus", so it must not outlive a produce that failed:
the caller releases (DEL) the marks it set whenever it cannot answer 202, and the sender's
retry is then accepted. This is the fast path only: the durable dedupe is triage's inbox
(event ids are deterministic, see :mod:`ira.sources.identity`).

Every key of one source carries the hash tag ``{<source id>}``, so the script and the
release stay in one slot on a Redis Cluster too.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta

from redis.asyncio import Redis
from redis.exceptions import RedisError

from ira.sources.errors import EdgeUnavailableError
from ira.sources.ratelimit import RateWindow

DEFAULT_PREFIX = "ira:"

ADMIT_SCRIPT = """
-- KEYS[1]: the source's counter for this rate window; KEYS[2..]: one dedupe mark per event.
-- ARGV[1]: the rate limit; ARGV[2]: the counter's TTL (ms); ARGV[3]: the dedupe window (ms).
-- Returns {count, fresh_1, ...}: fresh_i is 1 if this call set mark i; no marks when over the rate.
local count = redis.call('INCR', KEYS[1])
if count == 1 then redis.call('PEXPIRE', KEYS[1], ARGV[2]) end
local result = {count}
if count > tonumber(ARGV[1]) then return result end
for i = 2, #KEYS do
  result[i] = redis.call('SET', KEYS[i], '1', 'NX', 'PX', ARGV[3]) and 1 or 0
end
return result
"""


@dataclass(frozen=True)
class Admission:
    """What the edge script answered: the request's count in its window, which marks it set."""

    count: int
    fresh: list[bool]


class EdgeDedupe:
    """Marks, counts and releases under ``prefix`` (tests isolate themselves by prefix)."""

    def __init__(self, redis: Redis, *, prefix: str = DEFAULT_PREFIX) -> None:
        self._redis = redis
        self._prefix = prefix
        self._admit = redis.register_script(ADMIT_SCRIPT)

    def source_prefix(self, source_id: str) -> str:
        """``<prefix>{<source id>}:``: the hash tag keeps one source's keys in one cluster slot."""
        return f"{self._prefix}{{{source_id}}}:"

    def key(self, source_id: str, event_id: str) -> str:
        return f"{self.source_prefix(source_id)}seen:{event_id}"

    async def admit(self, rate: RateWindow, keys: Sequence[str], *, window: timedelta) -> Admission:
        """Count the request and, if within the rate, ``SET NX PX`` every key; one round trip."""
        args = (rate.limit, rate.window_ms * 2, max(1, int(window.total_seconds() * 1000)))
        try:
            reply = await self._admit(keys=[rate.key, *keys], args=args)
        except (RedisError, OSError) as exc:
            raise EdgeUnavailableError(f"redis: {type(exc).__name__}: {exc}") from exc
        count, marks = int(reply[0]), reply[1:]
        return Admission(count=count, fresh=[mark == 1 for mark in marks] if marks else [False] * len(keys))

    async def release(self, keys: Sequence[str]) -> None:
        """Delete marks this request set, so the sender's retry is not taken for a duplicate."""
        if not keys:
            return
        try:
            await self._redis.delete(*keys)
        except (RedisError, OSError) as exc:
            raise EdgeUnavailableError(f"redis: releasing {len(keys)} dedupe mark(s): {type(exc).__name__}") from exc
