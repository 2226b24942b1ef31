"""Edge dedupe: an alert state the gateway already made durable is answered "duplicate"
without touching the store or the broker.

One mark per event, ``<mark> = 1 PX <window>``, lapsing on its own. All marks of a request are
read (or set) by ONE small server-side script that also counts the request against its
source's rate window and takes its alerts from the source's alert bucket
(:mod:`ira.sources.ratelimit`), and looks at no mark when either refuses: one command instead
of a pipeline of N+3 is what keeps a 100-alert request cheap.

A mark promises "this state is durable", so it is set only once that is true, and how depends
on the commit point (``ingest.ack``):

* ``store`` (:data:`CHECK`, then :data:`MARK`): the script only *reads* the marks; events
  without one go to the store's outbox, whose unique message id is the durable dedupe (1,000
  concurrent copies -> one row, one "accepted"); once that transaction committed, their marks
  are set (:meth:`EdgeDedupe.mark`: the 202 does not wait for them). A crash between the two
  leaves no mark behind, so the sender's retry is never taken for a duplicate of something
  that was not stored.
* ``broker`` (:data:`CLAIM`): ``SET NX`` claims the marks first (the claim is the dedupe across
  gateway replicas), and the caller releases (DEL) them whenever it cannot answer 202.

Requests of one source that arrive together share a call: while one call is in flight, the
next requests queue, and the next call serves all of them (each still counted and marked on
its own, in arrival order). A call costs the client tens of µs of CPU (redis-py's whole
command path cost ~100 µs, the largest single cost of a webhook, so the script is called through
:class:`~ira.sources.held_script.HeldScript`); under load one call serves many requests, and
with no load a request waits for nothing but its own call. The durable dedupe is the store (the outbox, then
triage's inbox): event ids are deterministic (:mod:`ira.sources.identity`).

Every key of one source carries the hash tag ``{<source id>}``, so the script and the
release stay in one slot on a Redis Cluster too.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta

from redis.asyncio import Redis
from redis.exceptions import RedisError

from ira.sources.errors import EdgeUnavailableError
from ira.sources.held_script import HeldScript
from ira.sources.ratelimit import RateWindow

log = logging.getLogger(__name__)

DEFAULT_PREFIX = "ira:"

CLAIM, CHECK, MARK = "claim", "check", "mark"
"""What the script does with a request's marks: claim them (SET NX), only look (EXISTS), or
set them (SET: the events are durable now; nothing is counted)."""

ADMIT_SCRIPT = """
-- Serves n requests of one source, in order. ARGV[1] = n; then per request ONE value, its eight
-- numbers and words separated by spaces: the rate limit, the counter's TTL (ms), the dedupe
-- window (ms), its number of marks k, its op, the alert bucket's refill per second (0: alerts
-- not counted), its size, now (ms).
-- KEYS: per request, its rate counter, its alert bucket, then its k marks.
-- Returns ONE string, per request "<count> <wait> f<flags>" joined by spaces: its count (0 for
-- 'mark'), the ms until the bucket holds its k alerts (0: taken) and k flags: 1 = fresh (claim:
-- this call set the mark; check: no mark there; mark: set), 0 = a mark was there or the request
-- was refused (then no mark is looked at). (One string and one value per request: packing
-- eight values and parsing k + 2 replies per request cost the client more than the script.)
local function take(bucket, n, rate, size, now)
  local held = redis.call('HMGET', bucket, 't', 'at')
  local tokens, at = tonumber(held[1]), tonumber(held[2])
  if tokens == nil or at == nil then tokens, at = size, now end
  if now > at then tokens, at = math.min(size, tokens + (now - at) * rate / 1000), now end
  local wait = 0
  if tokens < n then wait = math.max(1, math.ceil((n - tokens) * 1000 / rate)) else tokens = tokens - n end
  redis.call('HSET', bucket, 't', tostring(tokens), 'at', tostring(at))
  redis.call('PEXPIRE', bucket, math.ceil(size * 1000 / rate) + 1000)
  return wait
end
local out, key = {}, 1
for request = 1, tonumber(ARGV[1]) do
  local limit, ttl, window, marks, op, rate, size, now =
    string.match(ARGV[request + 1], '^(%S+) (%S+) (%S+) (%S+) (%S+) (%S+) (%S+) (%S+)$')
  limit, marks, rate = tonumber(limit), tonumber(marks), tonumber(rate)
  local count, wait = 0, 0
  if op ~= 'mark' then
    count = redis.call('INCR', KEYS[key])
    if count == 1 then redis.call('PEXPIRE', KEYS[key], ttl) end
    if count <= limit and rate > 0 and marks > 0 then
      wait = take(KEYS[key + 1], marks, rate, tonumber(size), tonumber(now))
    end
  end
  local flags = {}
  for i = 1, marks do
    local fresh = '0'
    if op == 'mark' then
      redis.call('SET', KEYS[key + 1 + i], '1', 'PX', window)
      fresh = '1'
    elseif count <= limit and wait == 0 then
      if op == 'claim' then
        if redis.call('SET', KEYS[key + 1 + i], '1', 'NX', 'PX', window) then fresh = '1' end
      elseif redis.call('EXISTS', KEYS[key + 1 + i]) == 0 then
        fresh = '1'
      end
    end
    flags[i] = fresh
  end
  out[request] = string.format('%d %d f%s', count, wait, table.concat(flags))
  key = key + marks + 2
end
return table.concat(out, ' ')
"""
MAX_KEYS_PER_CALL = 4096
"""A bound on one call's work, so a burst of 100-alert requests is admitted in a few calls."""


@dataclass(frozen=True)
class Admission:
    """What the edge script answered: the request's count in its window, which marks it set,
    and how long until the alert bucket could take the request's alerts (0: it took them)."""

    count: int
    fresh: list[bool]
    alert_wait_ms: int = 0

    def check(self, rate: RateWindow) -> None:
        """Raise the 429 of whichever limit refused the request (nothing of it was marked)."""
        rate.check(self.count, alerts=len(self.fresh), alert_wait_ms=self.alert_wait_ms)


@dataclass(frozen=True)
class _Ask:
    """One request waiting for its source's next call."""

    rate: RateWindow
    keys: list[str]
    window_ms: int
    op: str
    answer: asyncio.Future[Admission]

    def arg(self) -> str:
        """Its eight values, as the script reads them (one argument: see ADMIT_SCRIPT)."""
        bucket = self.rate.alerts
        per_second, size = (bucket.per_second, bucket.capacity) if bucket else (0, 0)
        return (f"{self.rate.limit} {self.rate.window_ms * 2} {self.window_ms} {len(self.keys)} {self.op} "
                f"{per_second!r} {size} {self.rate.now_ms}")

    def bucket_key(self) -> str:
        """Its source's alert bucket (a placeholder key under the source's tag when none is counted)."""
        return self.rate.alerts.key if self.rate.alerts else f"{self.rate.key}:alerts"


def _log_unset_marks(answer: asyncio.Future[Admission]) -> None:
    if not answer.cancelled() and (exc := answer.exception()) is not None:
        log.warning("could not set dedupe mark(s) after the commit: %s", exc)


class EdgeDedupe:
    """Marks, counts and releases under ``prefix`` (tests isolate themselves by prefix)."""

    def __init__(self, redis: Redis, *, prefix: str = DEFAULT_PREFIX) -> None:
        self._redis = redis
        self._prefix = prefix
        self._admit = HeldScript(redis, ADMIT_SCRIPT)
        self._waiting: dict[str, list[_Ask]] = {}
        """Per source: the requests the next call admits (a source's keys share a cluster slot)."""
        self._callers: dict[str, asyncio.Task[None]] = {}
        """Per source: the task making calls while requests wait."""
        self.calls = 0
        """Admission calls made so far (fewer than requests when they shared calls)."""

    def source_prefix(self, source_id: str) -> str:
        """``<prefix>{<source id>}:``: the hash tag keeps one source's keys in one cluster slot."""
        return f"{self._prefix}{{{source_id}}}:"

    def key(self, source_id: str, event_id: str) -> str:
        return f"{self.source_prefix(source_id)}seen:{event_id}"

    async def admit(self, rate: RateWindow, keys: Sequence[str], *, window: timedelta, op: str = CLAIM) -> Admission:
        """Count the request and, if within the rate, claim (``SET NX PX``) or only look at every
        key; with :data:`MARK`, set every key and count nothing (see the module doc)."""
        return await self._ask(rate, keys, window, op)

    def mark(self, rate: RateWindow, keys: Sequence[str], *, window: timedelta) -> None:
        """Set ``keys`` (their events are durable now) without waiting for Redis: the request's
        answer does not need them. The marks are set in the order asked, so a copy checked
        after this call is checked after they are set; one that cannot be set is logged (it
        only costs the next copy a trip to the store)."""
        self._ask(rate, keys, window, MARK).add_done_callback(_log_unset_marks)

    def _ask(self, rate: RateWindow, keys: Sequence[str], window: timedelta, op: str) -> asyncio.Future[Admission]:
        ask = _Ask(rate, list(keys), max(1, int(window.total_seconds() * 1000)), op,
                   asyncio.get_running_loop().create_future())
        self._waiting.setdefault(rate.source_id, []).append(ask)
        if rate.source_id not in self._callers:
            self._callers[rate.source_id] = asyncio.create_task(self._call_while_waiting(rate.source_id),
                                                              name=f"edge-admit-{rate.source_id}")
        return ask.answer

    async def _call_while_waiting(self, source_id: str) -> None:
        """Admit this source's waiting requests, a call at a time, until none wait."""
        try:
            while waiting := self._waiting.get(source_id):
                taken, size = 1, len(waiting[0].keys) + 2
                while taken < len(waiting) and size + len(waiting[taken].keys) + 1 < MAX_KEYS_PER_CALL:
                    size += len(waiting[taken].keys) + 2
                    taken += 1
                batch = waiting[:taken]
                del waiting[:taken]
                try:
                    await self._call(batch)
                except asyncio.CancelledError:  # the gateway is stopping: nobody is left to answer them
                    for ask in (*batch, *waiting):
                        if not ask.answer.done():
                            ask.answer.set_exception(EdgeUnavailableError("edge admission stopped"))
                    waiting.clear()
                    raise
        finally:
            del self._callers[source_id]
            if not self._waiting.get(source_id):
                self._waiting.pop(source_id, None)

    async def _call(self, batch: list[_Ask]) -> None:
        keys = [key for ask in batch for key in (ask.rate.key, ask.bucket_key(), *ask.keys)]
        args = [str(len(batch)), *(ask.arg() for ask in batch)]
        self.calls += 1
        try:
            reply = await self._admit(keys, args)
        except Exception as exc:  # Redis down or refusing: every request of the call answers 503
            for ask in batch:
                if not ask.answer.done():
                    ask.answer.set_exception(EdgeUnavailableError(f"redis: {type(exc).__name__}: {exc}"))
            return
        answers = (reply.decode() if isinstance(reply, bytes) else reply).split(" ")
        orphaned = []
        for at, ask in enumerate(batch):
            count, wait, flags = answers[3 * at:3 * at + 3]
            fresh = [flag == "1" for flag in flags[1:]]
            if ask.answer.done():  # its request was cancelled meanwhile: nobody will produce these
                if ask.op == CLAIM:
                    orphaned += [key for key, is_fresh in zip(ask.keys, fresh, strict=True) if is_fresh]
            else:
                ask.answer.set_result(Admission(count=int(count), fresh=fresh, alert_wait_ms=int(wait)))
        if orphaned:
            with contextlib.suppress(EdgeUnavailableError):
                await self.release(orphaned)

    async def release(self, keys: Sequence[str]) -> None:
        """Delete marks this request set, so the sender's retry is not taken for a duplicate."""
        if not keys:
            return
        try:
            await self._redis.delete(*keys)
        except (RedisError, OSError) as exc:
            raise EdgeUnavailableError(f"redis: releasing {len(keys)} dedupe mark(s): {type(exc).__name__}") from exc
