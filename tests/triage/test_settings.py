"""The ``triage:`` section of ira.yaml: defaults, silences, and errors that name the key."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest

from ira.core.alert import Severity
from ira.core.errors import ConfigError
from ira.runtime.settings import load_settings

EXPIRES = "expires_at: '2026-12-01T00:00:00Z'"


def load(tmp_path: Path, yaml: str):  # type: ignore[no-untyped-def]
    path = tmp_path / "ira.yaml"
    path.write_text(yaml)
    return load_settings({"IRA_CONFIG": str(path)})


def test_the_dev_defaults_group_by_alertname_service_environment() -> None:
    triage = load_settings({}).triage

    assert triage.group_by == ("alertname", "service", "environment")
    assert (triage.severity_threshold, triage.cooldown, triage.quiet_period) == (
        Severity.WARNING, timedelta(minutes=30), timedelta(minutes=5))
    assert triage.noise.enabled and triage.silences == ()


def test_silences_and_per_tenant_grouping_come_from_yaml(tmp_path: Path) -> None:
    triage = load(tmp_path, """
triage:
  tenant_group_by: {acme: [alertname, cluster]}
  severity_threshold: high
  cooldown: 10m
  silences:
    - id: maint-42
      matchers: [{name: service, value: checkout}, {name: alertname, op: "=~", value: "High.*"}]
      expires_at: "2026-12-01T00:00:00Z"
""").triage

    assert triage.group_by_for("acme") == ("alertname", "cluster")
    assert triage.group_by_for("other") == ("alertname", "service", "environment")
    assert [m.op for m in triage.silences[0].matchers] == ["=", "=~"]
    assert (triage.severity_threshold, triage.cooldown) == (Severity.HIGH, timedelta(minutes=10))


@pytest.mark.parametrize(("yaml", "key"), [
    (f"triage:\n  silences:\n    - {{id: s, matchers: [{{name: a, op: '=~', value: '('}}], {EXPIRES}}}\n",
     "triage.silences.0.matchers.0"),
    (f"triage:\n  silences:\n    - {{id: s, matchers: [], {EXPIRES}}}\n", "triage.silences.0.matchers"),
    ("triage:\n  noise: {window: 1m, hop: 5m}\n", "triage.noise"),
    ("triage:\n  severity_threshold: page\n", "triage.severity_threshold"),
    ("triage:\n  grouping: [a]\n", "triage.grouping"),
])
def test_a_bad_triage_setting_names_its_key(tmp_path: Path, yaml: str, key: str) -> None:
    with pytest.raises(ConfigError) as raised:
        load(tmp_path, yaml)

    assert raised.value.key.startswith(key)
