"""Triage's transaction on SQLite and PostgreSQL: incidents, evaluations with their basis, outbox.

Given/When/Then against the real store; every test runs on both backends (``db`` fixture).
"""

from __future__ import annotations

import asyncio

import pytest
from redis.asyncio import Redis
from sqlalchemy import select, update

from ira.core.alert import Severity
from ira.core.clock import FrozenClock
from ira.core.errors import ConcurrentUpdateError, InvalidMessageError
from ira.runtime.settings.triage import SilenceMatcher, SilenceSettings, TriageSettings
from ira.runtime.store.database import Database
from ira.runtime.store.schema import runs
from ira.triage import store
from ira.triage.decide import NoiseVerdict
from ira.triage.noise import RedisNoiseState
from ira.triage.tables import changes
from tests.triage.builders import T0, alert, change, envelope, resolved
from tests.triage.harness import (
    alert_rows,
    apply,
    apply_envelope,
    evaluations,
    handler,
    incident_rows,
    minutes,
    published,
    start_run,
    updates_sent,
)


@pytest.fixture
def clock() -> FrozenClock:
    return FrozenClock(T0)


async def test_a_new_critical_alert_opens_an_incident_and_asks_for_a_run(db: Database, clock: FrozenClock) -> None:
    evaluation = await apply(db, handler(clock), alert(fingerprint="fp-1"))

    [incident] = await incident_rows(db)
    assert (evaluation.decision, evaluation.reason) == ("create_run", "new_incident")
    assert (incident["status"], incident["version"], incident["firing_count"]) == ("open", 1, 1)
    assert incident["group_key"] == '{alertname="HighErrorRate",environment="prod",service="checkout"}'
    [decision] = await published(db)
    assert (decision.decision, decision.incident_id, decision.incident_version) == (
        "create_run", incident["incident_id"], 1)
    assert decision.alert.fingerprint == "fp-1" and decision.title == "HighErrorRate on checkout"
    [row] = await alert_rows(db)
    assert row["payload"]["labels"] == {"alertname": "HighErrorRate"}  # the normalized payload, for replay


async def test_alerts_of_one_group_share_the_incident_and_move_its_version(db: Database, clock: FrozenClock) -> None:
    triage = handler(clock)
    await apply(db, triage, alert(fingerprint="fp-1"))
    second = await apply(db, triage, alert(fingerprint="fp-2", severity=Severity.WARNING))
    other = await apply(db, triage, alert(fingerprint="fp-3", service="payments"))

    first_incident, other_incident = await incident_rows(db)
    assert (second.decision, second.reason, second.incident_id) == ("ignore", "cooldown",
                                                                     first_incident["incident_id"])
    assert (first_incident["version"], first_incident["firing_count"]) == (2, 2)
    assert other.reason == "new_incident" and other_incident["incident_id"] == other.incident_id
    assert len(await published(db)) == 2  # ignore stays local


async def test_a_known_source_identity_is_ignored_as_a_duplicate(db: Database, clock: FrozenClock) -> None:
    triage = handler(clock)
    first = alert(source_event_id="am:fp-1:1")
    await apply(db, triage, first)
    again = await apply(db, triage, alert(source_event_id="am:fp-1:1"))  # new event id, same source identity

    [incident] = await incident_rows(db)
    assert (again.decision, again.reason, again.incident_id) == ("ignore", "duplicate", incident["incident_id"])
    assert again.basis["first_event_id"] == first.event_id
    assert len(await alert_rows(db)) == 1 and incident["version"] == 1
    assert len(await published(db)) == 1


async def test_an_event_older_than_the_alerts_last_state_is_stale(db: Database, clock: FrozenClock) -> None:
    triage = handler(clock)
    await apply(db, triage, alert(at=T0))
    await apply(db, triage, resolved(at=T0 + minutes(5)))
    late_firing = await apply(db, triage, alert(at=T0 - minutes(1), source_event_id="late"))

    [incident] = await incident_rows(db)
    assert (late_firing.decision, late_firing.reason) == ("ignore", "stale")
    assert late_firing.basis["last_status"] == "resolved"
    assert (incident["version"], incident["firing_count"], incident["status"]) == (2, 0, "resolved")


async def test_a_resolve_without_a_firing_incident_is_ignored(db: Database, clock: FrozenClock) -> None:
    evaluation = await apply(db, handler(clock), resolved())

    assert (evaluation.decision, evaluation.reason, evaluation.incident_id) == (
        "ignore", "resolved_without_incident", None)
    assert await incident_rows(db) == []


async def test_below_threshold_is_recorded_and_an_escalation_asks_for_the_run(db: Database, clock: FrozenClock) -> None:
    triage = handler(clock, TriageSettings(severity_threshold=Severity.HIGH))
    low = await apply(db, triage, alert(fingerprint="fp-1", severity=Severity.WARNING))
    high = await apply(db, triage, alert(fingerprint="fp-2", severity=Severity.CRITICAL))

    [incident] = await incident_rows(db)
    assert (low.reason, low.basis["threshold"]) == ("below_threshold", "high")
    assert (high.decision, high.reason, high.incident_id) == ("create_run", "reinvestigate", incident["incident_id"])
    assert incident["severity"] == "critical" and incident["run_evaluation_id"] == high.evaluation_id


async def test_follow_ups_go_to_the_active_runs_subscription_folded(db: Database, clock: FrozenClock) -> None:
    triage = handler(clock)
    opened = await apply(db, triage, alert(fingerprint="fp-1"))
    run_id = await start_run(db, opened.incident_id)
    joined = await apply(db, triage, alert(fingerprint="fp-2", at=T0 + minutes(1)))  # first follow-up: at once
    held = await apply(db, triage, resolved(fingerprint="fp-1", at=T0 + minutes(2)))  # inside the interval: held
    last = await apply(db, triage, resolved(fingerprint="fp-2", at=T0 + minutes(3)))  # all resolved: at once

    assert [d.decision for d in await published(db)] == ["create_run"]
    first, second = await updates_sent(db)
    assert (first.run_id, first.seq, first.trigger, first.changes.joined, first.changes.incident_version) == (
        run_id, 1, "interval", 1, 2)
    assert first.changes.names_joined == ("HighErrorRate",)
    assert (second.seq, second.trigger, second.changes.events, second.changes.resolved) == (2, "all_resolved", 2, 2)
    assert (second.changes.incident_version, second.all_resolved) == (4, True)
    assert last.basis["run_id"] == run_id and last.reason == "run_subscribed"
    assert [e.basis["update"]["seq"] for e in (joined, held, last)] == [1, 2, 2]


async def test_a_finished_run_is_no_subscription(db: Database, clock: FrozenClock) -> None:
    triage = handler(clock)
    opened = await apply(db, triage, alert())
    run_id = await start_run(db, opened.incident_id)
    async with db.transaction() as conn:
        await conn.execute(update(runs).where(runs.c.run_id == run_id).values(state="completed"))
    evaluation = await apply(db, triage, resolved(at=T0 + minutes(1)))

    assert (evaluation.decision, evaluation.reason) == ("ignore", "resolved_without_run")


async def test_an_incident_closes_after_its_quiet_period_and_the_cooldown_holds_across(
    db: Database, clock: FrozenClock
) -> None:
    triage = handler(clock, TriageSettings(quiet_period=minutes(5), cooldown=minutes(30)))
    first = await apply(db, triage, alert(at=T0))
    await apply(db, triage, resolved(at=T0 + minutes(1)))
    clock.advance(minutes(3))
    refire = await apply(db, triage, alert(at=T0 + minutes(3), source_event_id="refire"))
    await apply(db, triage, resolved(at=T0 + minutes(4), source_event_id="resolve-2"))
    clock.advance(minutes(10))  # quiet period over
    next_day = await apply(db, triage, alert(at=T0 + minutes(14), source_event_id="third"))
    clock.advance(minutes(30))  # cooldown over too
    later = await apply(db, triage, alert(fingerprint="fp-2", at=T0 + minutes(44)))

    closed, reopened = await incident_rows(db)
    assert refire.incident_id == first.incident_id and refire.reason == "cooldown"
    assert closed["status"] == "closed" and closed["version"] == 4
    assert next_day.incident_id == reopened["incident_id"] != first.incident_id
    assert (next_day.reason, later.reason) == ("cooldown", "reinvestigate")


async def test_a_silenced_alert_is_ignored_naming_the_silence(db: Database, clock: FrozenClock) -> None:
    silence = SilenceSettings(id="maint-42", matchers=(SilenceMatcher(name="service", value="checkout"),),
                              expires_at=T0 + minutes(60))
    triage = handler(clock, TriageSettings(silences=(silence,)))
    quiet = await apply(db, triage, alert(service="checkout"))
    clock.advance(minutes(61))
    loud = await apply(db, triage, alert(service="checkout", fingerprint="fp-2"))

    assert (quiet.decision, quiet.reason, quiet.basis["silence_id"], quiet.incident_id) == (
        "ignore", "silenced", "maint-42", None)
    assert loud.reason == "new_incident"


async def test_a_flapping_verdict_holds_back_a_new_run_and_redis_down_does_not(
    db: Database, clock: FrozenClock, redis_url: str, redis_prefix: str
) -> None:
    redis = Redis.from_url(redis_url)
    noise = RedisNoiseState(redis, prefix=redis_prefix)
    triage = handler(clock, noise=noise)
    first = await apply(db, triage, alert(fingerprint="fp-1"))
    key = first.basis["group_key"]
    await noise.record("acme", key, NoiseVerdict(kind="flapping", until=T0 + minutes(30), transitions=7, alerts=8,
                                                 window_seconds=300), now=T0)
    await apply(db, triage, resolved(fingerprint="fp-1", at=T0 + minutes(1)))
    clock.advance(minutes(40))  # the cooldown is over, the verdict too: a new run would be asked for
    await noise.record("acme", key, NoiseVerdict(kind="flapping", until=T0 + minutes(70), transitions=7, alerts=8,
                                                 window_seconds=300), now=T0)
    flapping = await apply(db, triage, alert(fingerprint="fp-1", at=T0 + minutes(40)))
    unreachable = RedisNoiseState(Redis.from_url("redis://127.0.0.1:1/0"), prefix=redis_prefix)
    clock.advance(minutes(31))
    blind = await apply(db, handler(clock, noise=unreachable), alert(fingerprint="fp-2", at=T0 + minutes(71)))
    await redis.aclose()

    assert (flapping.decision, flapping.reason, flapping.basis["noise"]["kind"]) == ("ignore", "flapping", "flapping")
    assert (blind.decision, blind.reason) == ("create_run", "reinvestigate")


async def test_a_flapping_group_with_a_run_gets_flapping_decisions_not_a_draft_per_flip(
    db: Database, clock: FrozenClock, redis_url: str, redis_prefix: str
) -> None:
    # Given an incident whose run is active, and a group the noise worker found flapping
    redis = Redis.from_url(redis_url)
    noise = RedisNoiseState(redis, prefix=redis_prefix)
    triage = handler(clock, noise=noise)
    opened = await apply(db, triage, alert(fingerprint="fp-1"))
    run_id = await start_run(db, opened.incident_id)
    await noise.record("acme", opened.basis["group_key"], NoiseVerdict(
        kind="flapping", until=T0 + minutes(30), transitions=7, alerts=8, window_seconds=300), now=T0)
    # When the alert flips a dozen times
    flips = []
    for i in range(6):
        flips.append(await apply(db, triage, resolved(fingerprint="fp-1", at=T0 + minutes(1 + 2 * i))))
        flips.append(await apply(db, triage, alert(fingerprint="fp-1", at=T0 + minutes(2 + 2 * i))))
    await redis.aclose()
    # Then the run is not sent one update per flip: flapping decisions, with the run and the verdict
    assert [d.decision for d in await published(db)] == ["create_run"] and await updates_sent(db) == []
    assert {(f.decision, f.reason) for f in flips} == {("ignore", "flapping")}
    assert all(f.basis["run_id"] == run_id and f.basis["noise"]["kind"] == "flapping" for f in flips)
    # and the incident still follows the alert's state
    [incident] = await incident_rows(db)
    assert incident["version"] == 13 and incident["status"] == "open"


async def test_change_events_are_stored_once(db: Database, clock: FrozenClock) -> None:
    triage = handler(clock)
    await apply_envelope(db, triage, envelope(change(source_event_id="deploy-7")))
    await apply_envelope(db, triage, envelope(change(source_event_id="deploy-7")))
    async with db.reader() as conn:
        rows = (await conn.execute(select(changes))).all()

    assert [(r.service, r.version, r.source_event_id) for r in rows] == [("checkout", "v2.3.1", "deploy-7")]
    assert await incident_rows(db) == []


@pytest.mark.parametrize("mangle", [
    lambda e: e.model_copy(update={"type": "something.else"}),
    lambda e: e.model_copy(update={"payload": {**e.payload, "status": "exploded"}}),
    lambda e: e.model_copy(update={"tenant_id": "other"}),
])
async def test_unreadable_events_are_poison(db: Database, clock: FrozenClock, mangle) -> None:
    with pytest.raises(InvalidMessageError):
        await apply_envelope(db, handler(clock), mangle(envelope(alert())))

    assert await evaluations(db) == []


async def test_the_sweep_closes_incidents_past_their_quiet_period(db: Database, clock: FrozenClock) -> None:
    triage = handler(clock, TriageSettings(quiet_period=minutes(5)))
    await apply(db, triage, alert())
    await apply(db, triage, alert(fingerprint="fp-9", service="payments"))
    await apply(db, triage, resolved(at=T0 + minutes(1)))
    async with db.transaction() as conn:
        early = await store.close_quiet_incidents(conn, now=T0 + minutes(4))
        late = await store.close_quiet_incidents(conn, now=T0 + minutes(6))

    assert (early, late) == (0, 1)
    assert sorted(i["status"] for i in await incident_rows(db)) == ["closed", "open"]


async def test_concurrent_first_alerts_of_a_group_make_one_incident(db: Database, clock: FrozenClock) -> None:
    triage = handler(clock)
    made = await asyncio.gather(*(apply(db, triage, alert(fingerprint=f"fp-{i}")) for i in range(8)))

    [incident] = await incident_rows(db)
    assert {m.incident_id for m in made} == {incident["incident_id"]}
    assert (incident["version"], incident["firing_count"]) == (8, 8)
    assert sorted(m.reason for m in made) == ["cooldown"] * 7 + ["new_incident"]


async def test_an_incident_changed_since_it_was_read_fails_the_compare_and_set(
    db: Database, clock: FrozenClock,
) -> None:
    triage = handler(clock)
    await apply(db, triage, alert(fingerprint="fp-1"))
    await apply(db, triage, alert(fingerprint="fp-2", service="payments"))
    checkout, payments = (store.IncidentRecord.model_validate(row) for row in await incident_rows(db))
    moved = [(r.model_copy(update={"version": r.version + 1, "firing_count": 5}), r.version)
             for r in (checkout, payments)]

    with pytest.raises(ConcurrentUpdateError, match=payments.incident_id):
        async with db.transaction() as conn:  # payments was read one version ago
            await store.update_incidents(conn, [moved[0], (moved[1][0], payments.version - 1)])
    async with db.transaction() as conn:
        await store.update_incidents(conn, moved)

    assert [(r["version"], r["firing_count"]) for r in await incident_rows(db)] == [
        (checkout.version + 1, 5), (payments.version + 1, 5)]


async def test_a_batch_reads_the_noise_verdicts_of_all_its_groups_at_once(
    redis_url: str, redis_prefix: str
) -> None:
    redis = Redis.from_url(redis_url)
    noise = RedisNoiseState(redis, prefix=redis_prefix)
    flapping = NoiseVerdict(kind="flapping", until=T0 + minutes(30), transitions=7, alerts=8, window_seconds=300)
    await noise.record("acme", "g1", flapping, now=T0)
    await noise.record("other", "g1", flapping.model_copy(update={"kind": "storm"}), now=T0)
    await redis.set(f"{redis_prefix}triage:noise:{{acme}}:g3", b"not json")

    found = await noise.verdicts([("acme", "g1"), ("acme", "g2"), ("other", "g1"), ("acme", "g3"), ("acme", "g1")])
    unreachable = RedisNoiseState(Redis.from_url("redis://127.0.0.1:1/0"), prefix=redis_prefix)
    blind = await unreachable.verdicts([("acme", "g1")])
    await redis.aclose()

    assert {group: v.kind if v else None for group, v in found.items()} == {
        ("acme", "g1"): "flapping", ("acme", "g2"): None, ("other", "g1"): "storm", ("acme", "g3"): None}
    assert blind == {("acme", "g1"): None}
