"""How long a consumer's fetches wait at the broker: short while records come, long once quiet.

Why: the embedded broker (Tansu 0.6) answers a fetch only when its wait ends, not when a record
arrives, so a consumer whose first hop must be short (the run requests) fetches with a short
wait, and each of those fetches is a round trip that costs the broker and the consumer CPU even
when nothing comes: an idle ``ira dev`` spent more than half its CPU on the coordinator's three
consumers polling every 20-100 ms. Paced, a consumer that has had no record for ``idle_after``
fetches with ``idle_wait`` instead; the first record after the quiet arrives within that, and
the fetch that brings it puts the short wait back for those that follow (a storm, a run's
updates). Apache Kafka answers a fetch as soon as a record arrives, so there a long idle wait
costs no latency at all.

Pure (no I/O): the runner asks :meth:`FetchPace.after_fetch` after every fetch and applies the
wait it returns (:func:`ira.runtime.bus.consumer.set_fetch_wait`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta


@dataclass
class FetchPace:
    """The fetch wait a consumer should use now, from when its fetches last brought records."""

    busy_wait: timedelta
    idle_wait: timedelta
    idle_after: timedelta
    quiet_since: float
    """When (monotonic seconds) a fetch last brought records, or the consumer started."""
    idle: bool = field(default=False, init=False)

    @property
    def wait(self) -> timedelta:
        """The fetch wait that holds now."""
        return self.idle_wait if self.idle else self.busy_wait

    def after_fetch(self, brought_records: bool, now: float) -> timedelta | None:
        """Record a fetch's outcome at ``now``; the new fetch wait if it changes, else None."""
        if brought_records:
            self.quiet_since = now
            if self.idle:
                self.idle = False
                return self.busy_wait
            return None
        if not self.idle and now - self.quiet_since >= self.idle_after.total_seconds():
            self.idle = True
            return self.idle_wait
        return None
