"""The noise rules without faust: transitions, verdicts, which records count (pure)."""

from __future__ import annotations

from datetime import timedelta

import pytest

from ira.core.alert import AlertStatus
from ira.runtime.settings.triage import NoiseSettings, TriageSettings
from ira.triage.noise import noise_verdict, verdict_key
from ira.triage.noise_app import is_transition, noise_event
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


def test_verdict_keys_are_scoped_by_prefix_and_tenant() -> None:
    assert verdict_key("ira:prod:", "acme", "{a=\"b\"}") == 'ira:prod:triage:noise:{acme}:{a="b"}'
