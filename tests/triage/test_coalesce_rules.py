"""The pure rules of coalesced delivery: when a fold is due, what it counts, how flips are windowed."""

from __future__ import annotations

from datetime import timedelta

import pytest

from ira.core.alert import AlertStatus, Severity
from ira.triage.coalesce import FollowUp, Subscription, flips_with, fold, is_due, sent, subscribe, update_of
from tests.triage.builders import T0

INTERVAL = timedelta(seconds=10)
FIRING, RESOLVED = AlertStatus.FIRING, AlertStatus.RESOLVED


def follow_up(*, at: float, status: AlertStatus = FIRING, previous: AlertStatus | None = None, firing: int = 2,
              severity: Severity = Severity.WARNING, name: str = "A") -> FollowUp:
    return FollowUp(name=name, status=status, previous=previous, evaluation_id="evl", incident_version=2,
                    firing_count=firing, severity=severity, at=T0 + timedelta(seconds=at))


def fresh() -> Subscription:
    return subscribe("acme", "run-1", "inc-1", severity=Severity.WARNING, firing_count=1, now=T0)


def after_first_update() -> Subscription:
    return sent(fold(fresh(), follow_up(at=0), interval=INTERVAL), now=T0)


@pytest.mark.parametrize(("sub", "event", "due_after"), [
    (fresh(), follow_up(at=3), 3),  # the first follow-up after a quiet interval: at once
    (after_first_update(), follow_up(at=3), 10),  # inside the interval: when it ends
    (after_first_update(), follow_up(at=12), 12),  # after it: at once
    (after_first_update(), follow_up(at=3, status=RESOLVED, previous=FIRING, firing=0), 3),  # all resolved
    (after_first_update(), follow_up(at=3, severity=Severity.CRITICAL), 3),  # severity raised
])
def test_a_fold_is_due(sub: Subscription, event: FollowUp, due_after: float) -> None:
    folded = fold(sub, event, interval=INTERVAL)
    assert folded.due_at == T0 + timedelta(seconds=due_after)
    assert is_due(folded, T0 + timedelta(seconds=due_after)) and not is_due(folded, folded.due_at - timedelta(1e-6))


def test_a_waiting_fold_keeps_its_due_time_and_counts_every_follow_up() -> None:
    sub = after_first_update()
    for at, event in ((2, follow_up(at=2)), (4, follow_up(at=4, status=RESOLVED, previous=FIRING, firing=1)),
                      (6, follow_up(at=6, status=FIRING, previous=RESOLVED, name="B"))):
        sub = fold(sub, event, interval=INTERVAL)
        assert sub.due_at == T0 + INTERVAL, at
    update = update_of(sub)
    assert (update.seq, update.trigger, update.changes.events) == (2, "interval", 3)
    assert (update.changes.joined, update.changes.resolved, update.changes.refired) == (1, 1, 1)
    assert update.changes.names_joined == ("A",) and update.changes.names_resolved == ("A",)
    assert (update.changes.first_seen, update.changes.last_seen) == (T0 + timedelta(seconds=2),
                                                                      T0 + timedelta(seconds=6))


def test_all_resolved_is_urgent_once() -> None:
    resolved_all = follow_up(at=1, status=RESOLVED, previous=FIRING, firing=0)
    told = sent(fold(after_first_update(), resolved_all, interval=INTERVAL), now=T0 + timedelta(seconds=1))
    again = fold(told, follow_up(at=2, status=RESOLVED, previous=RESOLVED, firing=0), interval=INTERVAL)
    assert told.sent_resolved and again.due_at == T0 + timedelta(seconds=11)


@pytest.mark.parametrize(("since", "flips", "at", "flip", "expected"), [
    (None, 0, 0, True, 1),  # the first flip opens the window
    (0, 3, 60, True, 4),  # inside the window: counted on
    (0, 3, 60, False, 3),  # a new alert joining is no flip
    (0, 5, 300, True, 1),  # the window is over: it starts again with this flip
])
def test_flips_are_counted_in_a_window(since: float | None, flips: int, at: float, flip: bool, expected: int) -> None:
    start = None if since is None else T0 + timedelta(seconds=since)
    sub = fresh().model_copy(update={"flips": flips, "flips_since": start})
    counted = flips_with(sub, flip=flip, now=T0 + timedelta(seconds=at), window=timedelta(minutes=5))
    assert counted.transitions == expected and counted.window_seconds == 300
