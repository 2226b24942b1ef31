"""Silences: Alertmanager-style matchers with ids and expiry (table-driven, pure)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from pydantic import ValidationError

from ira.runtime.settings.triage import SilenceMatcher, SilenceSettings
from ira.triage.silence import find_silence, matcher_holds
from tests.triage.builders import T0, alert


def silence(*matchers: tuple[str, str, str], id: str = "maint-1", tenant: str | None = None,
            expires: timedelta = timedelta(hours=1), starts: timedelta | None = None) -> SilenceSettings:
    return SilenceSettings(id=id, matchers=tuple(SilenceMatcher(name=n, op=op, value=v) for n, op, v in matchers),
                           expires_at=T0 + expires, starts_at=T0 + starts if starts is not None else None,
                           tenant=tenant)


@pytest.mark.parametrize(("op", "pattern", "value", "holds"), [
    ("=", "checkout", "checkout", True),
    ("=", "checkout", "checkout-v2", False),
    ("!=", "checkout", "payments", True),
    ("!=", "checkout", "checkout", False),
    ("=~", "check.*", "checkout", True),
    ("=~", "check", "checkout", False),  # regexes match the whole value, as in Alertmanager
    ("!~", "pay.*", "checkout", True),
    ("!~", "check.*", "checkout", False),
])
def test_matchers_follow_alertmanager_semantics(op: str, pattern: str, value: str, holds: bool) -> None:
    assert matcher_holds(SilenceMatcher(name="service", op=op, value=pattern), value) is holds


@pytest.mark.parametrize(("configured", "now", "silenced_by"), [
    (silence(("service", "=", "checkout")), T0, "maint-1"),
    (silence(("service", "=", "checkout"), ("alertname", "=", "HighErrorRate")), T0, "maint-1"),
    (silence(("service", "=", "checkout"), ("alertname", "=", "Other")), T0, None),
    (silence(("service", "=", "checkout")), T0 + timedelta(hours=1), None),  # expired
    (silence(("service", "=", "checkout"), starts=timedelta(minutes=5)), T0, None),  # not yet started
    (silence(("service", "=", "checkout"), tenant="other"), T0, None),
    (silence(("service", "=", "checkout"), tenant="acme"), T0, "maint-1"),
    (silence(("team", "=~", "core|web")), T0, None),
])
def test_a_silence_applies_when_active_for_the_tenant_and_every_matcher_holds(configured, now, silenced_by) -> None:
    found = find_silence([configured], alert(service="checkout"), now)

    assert (found.id if found else None) == silenced_by


def test_the_first_applicable_silence_wins() -> None:
    first = silence(("service", "=", "payments"), id="a")
    second = silence(("service", "=", "checkout"), id="b")
    third = silence(("alertname", "=~", "High.*"), id="c")

    assert find_silence([first, second, third], alert(service="checkout"), T0).id == "b"


def test_an_invalid_regex_is_a_config_error_naming_the_matcher() -> None:
    with pytest.raises(ValidationError, match="service=~"):
        SilenceMatcher(name="service", op="=~", value="(")
