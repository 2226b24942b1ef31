"""Which alert the edge marks urgent: the first firing one of a group it has not seen lately."""

from __future__ import annotations

from datetime import timedelta

from ira.core.alert import AlertStatus
from ira.sources.urgent import FirstOfGroup
from tests.triage.builders import T0, alert, change


def by_name() -> FirstOfGroup:
    return FirstOfGroup(lambda a: a.name, window=timedelta(minutes=1), size=2)


def test_a_groups_first_firing_alert_is_urgent_its_follow_ups_are_not() -> None:
    urgent = by_name()
    assert urgent(alert("A", fingerprint="1"))
    assert not urgent(alert("A", fingerprint="2", at=T0 + timedelta(seconds=30)))
    assert urgent(alert("B", fingerprint="3"))


def test_a_group_quiet_for_longer_than_the_window_is_new_again() -> None:
    urgent = by_name()
    for seconds in (0, 50, 100):  # each within a minute of the one before: still the same storm
        urgent(alert("A", at=T0 + timedelta(seconds=seconds)))
    assert not urgent(alert("A", at=T0 + timedelta(seconds=150)))
    assert urgent(alert("A", at=T0 + timedelta(seconds=211)))


def test_resolved_alerts_and_changes_are_never_urgent_and_memory_is_bounded() -> None:
    urgent = by_name()
    assert not urgent(alert("A", status=AlertStatus.RESOLVED))
    assert not urgent(change())
    assert urgent(alert("A")) and urgent(alert("B")) and urgent(alert("C"))
    assert urgent(alert("A"))  # forgotten (size 2): one more urgent row, nothing worse
