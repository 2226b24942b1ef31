"""The relay's doorbell: a commit in a process without a relay wakes the relays of the others.

A relay publishes a row right after a commit of its own process left one
(``Database.waking_relay``). A row another process wrote waited for the relay's next poll
(``runtime.relay_poll_interval``, 200 ms): in ``ira dev`` every decision of triage's child
process, in the scale-out deployment every step wake-up, decision and notification, since the
relay runs in a process of its own, so a run's every hop could wait a poll. Now such a commit
rings: one Redis ``PUBLISH`` on the environment's channel, and every relay that ``SUBSCRIBE``\\ s
to it passes at once.

A ring is a hint, like the wake-up it causes: one lost (Redis away, a relay subscribing again)
costs the poll, as before; one too many costs a pass that finds nothing. A ring is never
waited for: the commit that rings has already returned. Rings that come before a publish
begins are covered by it; those that come while it is on its way are sent once more after it,
not once each.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

from redis.exceptions import RedisError

if TYPE_CHECKING:
    from redis.asyncio import Redis

log = logging.getLogger(__name__)

RETRY_SECONDS = 1.0
"""After Redis failed a relay's subscription: how long before it subscribes again (polling meanwhile)."""


def doorbell_channel(environment: str) -> str:
    """One channel per environment: a staging replay's commits do not wake production's relays."""
    return f"ira:{environment}:relay:wake"


class Doorbell:
    """Rings the channel for a process's commits (``ring`` is ``Database.waking_relay``'s callback)."""

    def __init__(self, redis: Redis, channel: str) -> None:
        self._redis, self._channel = redis, channel
        self._ringing: asyncio.Task[None] | None = None
        self._again = False
        self.rung = 0
        """Rings published (for tests)."""

    def ring(self) -> None:
        """Publish a ring soon; called after a commit, on the event loop, never waits."""
        if self._ringing is not None:
            self._again = True
            return
        self._ringing = asyncio.get_running_loop().create_task(self._publish(), name="relay-doorbell")

    async def _publish(self) -> None:
        try:
            while True:
                self._again = False
                try:
                    await self._redis.publish(self._channel, b"1")
                except (RedisError, OSError) as exc:  # the relays find the rows at their poll
                    log.debug("relay doorbell not rung: %r", exc)
                    return
                self.rung += 1
                if not self._again:
                    return
        finally:
            self._ringing = None


async def listen(redis: Redis, channel: str, wake: Callable[[], None]) -> None:
    """Call ``wake`` for every ring on ``channel`` until cancelled; subscribe again after a failure."""
    while True:
        pubsub = redis.pubsub(ignore_subscribe_messages=True)
        try:
            await pubsub.subscribe(channel)
            async for _message in pubsub.listen():
                wake()
        except (RedisError, OSError) as exc:
            log.warning("relay doorbell: %r; the relay polls until it hears it again", exc)
        finally:
            await pubsub.aclose()
        await asyncio.sleep(RETRY_SECONDS)
