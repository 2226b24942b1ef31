"""The noise rules without faust: transitions, verdicts, which records count, the windows (pure)."""

from __future__ import annotations

from datetime import timedelta

import pytest

from ira.core.alert import AlertStatus
from ira.runtime.bus.pack import PackMember, pack
from ira.runtime.settings.triage import NoiseSettings, TriageSettings
from ira.triage.noise import noise_verdict, verdict_key
from ira.triage.noise_app import (
    Counted,
    NoiseEvent,
    NoiseWindows,
    is_transition,
    noise_event,
    noise_events,
    routed,
)
from ira.triage.noise_rebuild import Ownership
from tests.triage.builders import T0, alert, change, envelope

NOISE = NoiseSettings(window=timedelta(minutes=5), hop=timedelta(minutes=1), flapping_transitions=6, storm_alerts=50)


@pytest.mark.parametrize(("previous", "status", "transition"), [
    ("", "firing", False),  # an alert's first event
    ("firing", "firing", False),
    ("firing", "resolved", True),
    ("resolved", "firing", True),
    ("resolved", "resolved", False),
])
def test_a_transition_is_a_change_between_firing_and_resolved(previous: str, status: str, transition: bool) -> None:
    assert is_transition(previous, status) is transition


@pytest.mark.parametrize(("transitions", "alerts", "kind"), [
    (0, 1, None), (5, 10, None), (6, 12, "flapping"), (19, 20, "flapping"), (0, 50, "storm"), (2, 49, None),
    (7, 80, "flapping"),  # flapping is the more specific finding
])
def test_verdicts(transitions: int, alerts: int, kind: str | None) -> None:
    verdict = noise_verdict(transitions=transitions, alerts=alerts, at=T0, settings=NOISE,
                            cooldown=timedelta(minutes=30))

    assert (verdict.kind if verdict else None) == kind
    if verdict:
        assert verdict.until == T0 + timedelta(minutes=30) and verdict.window_seconds == 300


def test_records_that_count_are_alerts_keyed_by_their_group() -> None:
    settings = TriageSettings()
    firing = noise_event(envelope(alert(fingerprint="fp-7", status=AlertStatus.FIRING)).to_bytes(), settings)

    assert firing is not None and (firing.fingerprint, firing.status, firing.at) == ("fp-7", "firing", T0.timestamp())
    assert firing.group_key == '{alertname="HighErrorRate",environment="prod",service="checkout"}'
    assert noise_event(envelope(change()).to_bytes(), settings) is None
    assert noise_event(b"not json", settings) is None
    assert noise_event(envelope(alert()).model_copy(update={"payload": {"x": 1}}).to_bytes(), settings) is None


def test_a_pack_counts_each_of_its_alerts_in_order_and_nothing_else() -> None:
    settings = TriageSettings()
    rows = [envelope(alert(fingerprint="fp-1", status=AlertStatus.FIRING)), envelope(change()),
            envelope(alert(fingerprint="fp-2", status=AlertStatus.RESOLVED))]
    packed = pack([PackMember(key="acme:x", headers={}, value=e.to_bytes()) for e in rows]
                  + [PackMember(key=None, headers={}, value=b"not json")])

    assert [(e.fingerprint, e.status) for e in noise_events(packed, settings)] == [
        ("fp-1", "firing"), ("fp-2", "resolved")]
    assert [e.fingerprint for e in noise_events(rows[0].to_bytes(), settings)] == ["fp-1"]  # a record of one
    assert noise_events(packed[:-3], settings) == [] and noise_events(None, settings) == []  # broken: poison


def test_verdict_keys_are_scoped_by_prefix_and_tenant() -> None:
    assert verdict_key("ira:prod:", "acme", "{a=\"b\"}") == 'ira:prod:triage:noise:{acme}:{a="b"}'


def event(fingerprint: str, status: str, at: float, group: str = "g1", tenant: str = "acme") -> NoiseEvent:
    return NoiseEvent(tenant_id=tenant, group_key=group, fingerprint=fingerprint, status=status, at=at)


def flips(fingerprint: str, start: float, count: int, step: float = 3.0) -> list[NoiseEvent]:
    """``count`` events of one alert, firing and resolved in turn, ``step`` seconds apart."""
    return [event(fingerprint, ("firing", "resolved")[i % 2], start + i * step) for i in range(count)]


def windows() -> NoiseWindows:
    return NoiseWindows(window=60.0, hop=10.0)


def test_a_fetch_is_routed_as_one_record_per_group_and_hop() -> None:
    events = [event("a", "firing", 100.0), event("b", "firing", 101.0, group="g2"), event("a", "resolved", 105.0),
              event("c", "firing", 112.0), event("a", "firing", 109.0, tenant="other")]

    records = routed(events, hop=10.0)

    assert [key for key, _ in records] == [b"acme|g1", b"acme|g2", b"acme|g1", b"other|g1"]
    assert b'"alerts":[["a","firing"],["a","resolved"]]' in records[0][1] and b'"at":105.0' in records[0][1]


def test_counting_a_fetch_at_once_counts_as_one_event_at_a_time() -> None:
    events = flips("a", 100.0, 9) + flips("b", 101.0, 4) + [event("c", "firing", 130.0)]
    together, alone = windows(), windows()

    last = [together.count(value) for _, value in routed(events, hop=10.0)][-1]
    for one in events:
        single = alone.count(routed([one], hop=10.0)[0][1])

    assert last is not None and single is not None
    assert (last.transitions, last.alerts) == (single.transitions, single.alerts) == (8 + 3, 14)
    assert together.buckets == alone.buckets


def test_the_window_is_the_last_window_of_event_time() -> None:
    state = windows()
    for _, value in routed(flips("a", 100.0, 7, step=5.0), hop=10.0):  # 100..130: six transitions
        counted = state.count(value)
    assert counted is not None and (counted.transitions, counted.alerts) == (6, 7)

    later = state.count(routed([event("b", "firing", 165.0)], hop=10.0)[0][1])  # buckets 11..16: 110..169

    assert later is not None and (later.transitions, later.alerts) == (5, 6)  # the events at 100 and 105 are out


def test_state_older_than_a_window_is_dropped() -> None:
    state = windows()
    state.count(routed([event("a", "firing", 100.0)] + flips("b", 100.0, 3), hop=10.0)[0][1])
    state.count(routed([event("c", "firing", 175.0)], hop=10.0)[0][1])  # bucket 17: buckets up to 11 go

    assert state.buckets == {"acme|g1": {17: [1, 0]}}
    assert set(state.last) == {"acme|g1|c"}
    resolved = state.count(routed([event("a", "resolved", 176.0)], hop=10.0)[0][1])
    assert resolved is not None and resolved.transitions == 0  # after a quiet window: no flap


def test_an_unreadable_record_is_skipped() -> None:
    state = windows()

    assert state.count(b"not json") is None and state.count(b'{"tenant_id":"acme"}') is None
    assert state.buckets == {} and state.last == {}


def test_a_rebuild_reads_from_the_first_record_of_a_bucket_still_kept() -> None:
    state = windows()
    for offset, (_, value) in enumerate(routed([event("a", "firing", 100.0), event("b", "firing", 115.0),
                                               event("c", "firing", 118.0, group="g2")], hop=10.0)):
        state.count(value, partition=offset % 2, offset=offset)  # offsets 0, 1, 2 on partitions 0, 1, 0
    assert state.rebuild_from() == {0: 0, 1: 1}

    state.count(routed([event("d", "firing", 160.0)], hop=10.0)[0][1], partition=1, offset=3)  # bucket 10 goes

    assert state.rebuild_from() == {0: 2, 1: 1}  # partition 0: the record of bucket 11, not the one of 10
    state.count(routed([event("e", "firing", 300.0)], hop=10.0)[0][1], partition=1, offset=4)
    assert state.rebuild_from() == {0: 3, 1: 4}  # nothing kept on partition 0: after its last record


def counted_on(state: NoiseWindows, partition: int, offset: int, events: list[NoiseEvent]) -> Counted | None:
    """Count ``events`` as one events-topic record at ``offset`` of ``partition``."""
    return state.count(routed(events, hop=10.0)[0][1], partition=partition, offset=offset)


async def test_a_rebalance_drops_the_partitions_taken_away_and_rebuilds_those_gained_before_counting() -> None:
    # Given an events topic holding g1's record on partition 0 and g2's on partition 1, 4 transitions each
    topic = {0: flips("a", 100.0, 5), 1: [event("b", s, 100.0 + i, group="g2")
                                          for i, s in enumerate(["firing", "resolved"] * 2 + ["firing"])]}
    state, rebuilt = windows(), []

    async def rebuild(partitions: set[int]) -> int:  # what noise_rebuild.rebuild does: count them again
        rebuilt.append(sorted(partitions))
        for partition in partitions:
            counted_on(state, partition, 0, topic[partition])
        return len(partitions)

    owner = Ownership(state, rebuild)
    owner.assigned({0, 1})
    await owner.ready()  # the start: both partitions read
    assert rebuilt == [[0, 1]] and set(state.buckets) == {"acme|g1", "acme|g2"}
    # When a rebalance takes partition 1 away (another worker counts g2 now)
    owner.assigned({0})
    await owner.ready()
    # Then g2's counts and last states are gone, g1's are kept
    assert set(state.buckets) == {"acme|g1"} and all(a.startswith("acme|g1|") for a in state.last)
    assert state.partitions() == {0} and rebuilt == [[0, 1]]
    # And when partition 1 comes back (that worker stopped), it is rebuilt before the next count:
    # one more flap of b is the fifth transition, not the first
    owner.assigned({0, 1})
    await owner.ready()
    after = counted_on(state, 1, 1, [event("b", "resolved", 107.0, group="g2")])
    assert rebuilt == [[0, 1], [1]]
    assert after is not None and (after.transitions, after.alerts) == (5, 6)
