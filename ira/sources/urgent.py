"""Which accepted alert is urgent: the first firing alert of a group the edge has not seen lately.

Such an alert probably opens a new incident, and someone waits for that incident's run; the
rest of a storm (alerts of groups seen a moment ago) are follow-ups triage folds into updates.
Its outbox row is marked ``urgent``, so the relay publishes it before any backlog of other
keys (never before an older row of its own key: ``outbox.claim_batch``).

The memory is this process's, bounded, and only a hint: a group another gateway saw, or one
forgotten, costs one more urgent row; a new incident of a group seen within ``window`` waits
in the backlog as before.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from datetime import datetime, timedelta

from ira.core.alert import AlertEvent, AlertStatus, ChangeEvent

WINDOW = timedelta(minutes=1)
"""A group quiet for longer than this is new again."""
SIZE = 50_000
"""Groups remembered (the least recently seen are forgotten first)."""


class FirstOfGroup:
    """``urgent(event)``: a firing alert whose group had no firing alert within ``window``."""

    def __init__(self, group_of: Callable[[AlertEvent], str], *, window: timedelta = WINDOW,
                 size: int = SIZE) -> None:
        self._group_of, self._window, self._size = group_of, window, size
        self._seen: OrderedDict[tuple[str, str], datetime] = OrderedDict()

    def __call__(self, event: AlertEvent | ChangeEvent) -> bool:
        if not isinstance(event, AlertEvent) or event.status != AlertStatus.FIRING:
            return False
        group, now = (event.tenant_id, self._group_of(event)), event.received_at
        last = self._seen.pop(group, None)
        self._seen[group] = now if last is None else max(last, now)
        while len(self._seen) > self._size:
            self._seen.popitem(last=False)
        return last is None or now - last > self._window
