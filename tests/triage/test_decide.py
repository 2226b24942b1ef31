"""The decision table: every reason, and which rule wins when several apply (pure)."""

from __future__ import annotations

import dataclasses
from datetime import timedelta

import pytest

from ira.core.alert import AlertStatus, DecisionKind, Severity
from ira.triage.decide import (
    AlertState,
    Case,
    Effect,
    IncidentState,
    NoiseVerdict,
    Policy,
    Reason,
    decide,
    duplicate,
    firing_delta,
    incident_effect,
    is_stale,
    needs_noise,
)
from tests.triage.builders import T0

FIRING, RESOLVED = AlertStatus.FIRING, AlertStatus.RESOLVED
POLICY = Policy(threshold=Severity.WARNING, cooldown=timedelta(minutes=30))


def incident(*, alert: AlertState | None = None, run: str | None = None, firing: int = 1) -> IncidentState:
    return IncidentState(incident_id="inc_1", version=3, firing_count=firing, alert=alert, active_run_id=run)


def case(status: AlertStatus = FIRING, *, severity: Severity = Severity.CRITICAL, at=T0, **kw: object) -> Case:
    return Case(status=status, severity=severity, state_at=at, now=T0 + timedelta(seconds=5), **kw)  # type: ignore[arg-type]


def flapping(until=T0 + timedelta(minutes=30), kind: str = "flapping") -> NoiseVerdict:
    return NoiseVerdict(kind=kind, until=until, transitions=8, alerts=9, window_seconds=300)  # type: ignore[arg-type]


was_firing = AlertState(status=FIRING, at=T0 - timedelta(minutes=5))
was_resolved = AlertState(status=RESOLVED, at=T0 - timedelta(minutes=1))
recent_run = T0 - timedelta(minutes=10)
old_run = T0 - timedelta(hours=2)


@pytest.mark.parametrize(("given", "decision", "reason"), [
    # a new incident
    (case(), DecisionKind.CREATE_RUN, Reason.NEW_INCIDENT),
    (case(severity=Severity.WARNING), DecisionKind.CREATE_RUN, Reason.NEW_INCIDENT),
    (case(severity=Severity.INFO), DecisionKind.IGNORE, Reason.BELOW_THRESHOLD),
    (case(RESOLVED), DecisionKind.IGNORE, Reason.RESOLVED_WITHOUT_INCIDENT),
    (case(last_run_at=recent_run), DecisionKind.IGNORE, Reason.COOLDOWN),
    (case(last_run_at=old_run), DecisionKind.CREATE_RUN, Reason.NEW_INCIDENT),
    (case(noise=flapping()), DecisionKind.IGNORE, Reason.FLAPPING),
    (case(noise=flapping(kind="storm")), DecisionKind.IGNORE, Reason.STORM),
    (case(noise=flapping(until=T0)), DecisionKind.CREATE_RUN, Reason.NEW_INCIDENT),  # verdict expired
    (case(silence_id="maint-1"), DecisionKind.IGNORE, Reason.SILENCED),
    # follow-ups in an open incident with a waiting run: its subscription
    (case(incident=incident(alert=was_firing, run="run_1")), DecisionKind.DELIVER, Reason.RUN_SUBSCRIBED),
    (case(RESOLVED, incident=incident(alert=was_firing, run="run_1")), DecisionKind.DELIVER, Reason.RUN_SUBSCRIBED),
    (case(severity=Severity.INFO, incident=incident(run="run_1")), DecisionKind.DELIVER, Reason.RUN_SUBSCRIBED),
    # a flapping group's follow-ups are decided flapping (one draft), a storm's still delivered
    (case(incident=incident(run="run_1"), noise=flapping()), DecisionKind.IGNORE, Reason.FLAPPING),
    (case(RESOLVED, incident=incident(alert=was_firing, run="run_1"), noise=flapping()), DecisionKind.IGNORE,
     Reason.FLAPPING),
    (case(incident=incident(run="run_1"), noise=flapping(kind="storm")), DecisionKind.DELIVER,
     Reason.RUN_SUBSCRIBED),
    (case(incident=incident(run="run_1"), noise=flapping(until=T0)), DecisionKind.DELIVER, Reason.RUN_SUBSCRIBED),
    # follow-ups without an active run
    (case(RESOLVED, incident=incident(alert=was_firing)), DecisionKind.IGNORE, Reason.RESOLVED_WITHOUT_RUN),
    (case(RESOLVED, incident=incident()), DecisionKind.IGNORE, Reason.RESOLVED_WITHOUT_INCIDENT),
    (case(incident=incident(alert=was_resolved), last_run_at=recent_run), DecisionKind.IGNORE, Reason.COOLDOWN),
    (case(incident=incident(alert=was_resolved), last_run_at=old_run), DecisionKind.CREATE_RUN,
     Reason.REINVESTIGATE),
    (case(incident=incident(), last_run_at=recent_run, noise=flapping()), DecisionKind.IGNORE, Reason.FLAPPING),
    # stale beats everything but a silence
    (case(at=T0 - timedelta(minutes=4), incident=incident(alert=was_firing, run="run_1")), DecisionKind.DELIVER,
     Reason.RUN_SUBSCRIBED),
    (case(at=T0 - timedelta(minutes=6), incident=incident(alert=was_firing, run="run_1")), DecisionKind.IGNORE,
     Reason.STALE),
    (case(silence_id="m", at=T0 - timedelta(minutes=6), incident=incident(alert=was_firing)), DecisionKind.IGNORE,
     Reason.SILENCED),
])
def test_decide(given: Case, decision: DecisionKind, reason: Reason) -> None:
    made = decide(given, POLICY)

    assert (made.decision, made.reason) == (decision, reason)


def test_the_basis_names_the_silence_the_run_and_the_cooldown() -> None:
    assert decide(case(silence_id="maint-1"), POLICY).basis == {"silence_id": "maint-1"}
    assert decide(case(incident=incident(run="run_9")), POLICY).basis == {"run_id": "run_9"}
    flapped = decide(case(incident=incident(run="run_9"), noise=flapping()), POLICY).basis
    assert flapped["run_id"] == "run_9" and flapped["noise"]["kind"] == "flapping"
    assert decide(case(last_run_at=recent_run), POLICY).basis == {
        "last_run_at": recent_run.isoformat(), "cooldown_until": (recent_run + timedelta(minutes=30)).isoformat()}
    assert decide(case(noise=flapping()), POLICY).basis["noise"]["transitions"] == 8
    assert duplicate("e-1").basis == {"first_event_id": "e-1"}


@pytest.mark.parametrize(("last", "status", "delta", "stale"), [
    (None, FIRING, timedelta(0), False),
    (AlertState(status=FIRING, at=T0), RESOLVED, timedelta(seconds=-1), True),
    (AlertState(status=FIRING, at=T0), RESOLVED, timedelta(0), False),
    (AlertState(status=RESOLVED, at=T0), FIRING, timedelta(0), True),  # a resolve beats a firing at one instant
    (AlertState(status=RESOLVED, at=T0), FIRING, timedelta(seconds=1), False),
    (AlertState(status=FIRING, at=T0), FIRING, timedelta(0), False),
])
def test_stale_means_older_than_the_last_recorded_state(last, status, delta, stale: bool) -> None:
    assert is_stale(last, status, T0 + delta) is stale


@pytest.mark.parametrize(("given", "reason", "effect"), [
    (case(), Reason.NEW_INCIDENT, Effect.OPEN),
    (case(severity=Severity.INFO), Reason.BELOW_THRESHOLD, Effect.OPEN),  # recorded, not investigated
    (case(incident=incident(alert=was_firing)), Reason.COOLDOWN, Effect.JOIN),
    (case(silence_id="m"), Reason.SILENCED, Effect.NONE),
    (case(RESOLVED), Reason.RESOLVED_WITHOUT_INCIDENT, Effect.NONE),
    (case(incident=incident(alert=was_firing)), Reason.STALE, Effect.LINK),
    (case(), Reason.DUPLICATE, Effect.NONE),
])
def test_incident_effect(given: Case, reason: Reason, effect: Effect) -> None:
    made = dataclasses.replace(decide(given, POLICY), reason=reason)

    assert incident_effect(given, made) == effect


@pytest.mark.parametrize(("last", "status", "delta"), [
    (None, FIRING, 1), (None, RESOLVED, 0),
    (was_firing, FIRING, 0), (was_firing, RESOLVED, -1),
    (was_resolved, FIRING, 1), (was_resolved, RESOLVED, 0),
])
def test_firing_delta(last, status, delta: int) -> None:
    assert firing_delta(last, status) == delta


@pytest.mark.parametrize(("given", "needed"), [
    (case(), True),
    (case(RESOLVED), False),
    (case(silence_id="m"), False),
    (case(incident=incident(run="run_1")), True),  # a follow-up: flapping stops its delivery
    (case(RESOLVED, incident=incident(run="run_1")), True),
    (case(silence_id="m", incident=incident(run="run_1")), False),
    (case(incident=incident()), True),
])
def test_noise_is_read_only_when_a_run_could_be_asked_for_or_a_run_gets_follow_ups(given: Case, needed: bool) -> None:
    assert needs_noise(given) is needed
