"""Group keys: which alerts share an incident (table-driven, pure)."""

from __future__ import annotations

import pytest

from ira.core.alert import Severity
from ira.core.grouping import group_key, group_labels, label_value
from tests.triage.builders import alert

DEFAULT = ("alertname", "service", "environment")


@pytest.mark.parametrize(("first", "second", "group_by", "same"), [
    (alert(fingerprint="a"), alert(fingerprint="b"), DEFAULT, True),
    (alert(labels={"instance": "h1"}), alert(labels={"instance": "h2"}), DEFAULT, True),
    (alert(service="checkout"), alert(service="payments"), DEFAULT, False),
    (alert(environment="prod"), alert(environment="staging"), DEFAULT, False),
    (alert("HighErrorRate"), alert("HighLatency"), DEFAULT, False),
    (alert("HighErrorRate"), alert("HighLatency"), ("service",), True),
    (alert(labels={"cluster": "eu"}), alert(labels={"cluster": "us"}), ("alertname", "cluster"), False),
    (alert(labels={"instance": "h1"}), alert(labels={"instance": "h2"}), ("...",), False),
    (alert(labels={"instance": "h1"}), alert(labels={"instance": "h1"}, fingerprint="x"), ("...",), True),
    (alert(service=None), alert(service=None, fingerprint="b"), DEFAULT, True),
])
def test_alerts_share_a_group_exactly_when_their_group_by_labels_agree(first, second, group_by, same) -> None:
    assert (group_key(group_labels(first, group_by)) == group_key(group_labels(second, group_by))) is same


@pytest.mark.parametrize(("event", "name", "expected"), [
    (alert("X"), "alertname", "X"),
    (alert(service="checkout", labels={"service": "raw"}), "service", "checkout"),
    (alert(service=None, labels={"service": "raw"}), "service", "raw"),
    (alert(environment=None), "environment", ""),
    (alert(severity=Severity.HIGH), "severity", "high"),
    (alert(labels={"team": "core"}), "team", "core"),
    (alert(), "missing", ""),
])
def test_label_value_prefers_normalized_fields_over_raw_labels(event, name: str, expected: str) -> None:
    assert label_value(event, name) == expected


def test_group_key_reads_like_alertmanagers_and_escapes_quotes() -> None:
    labels = group_labels(alert("A\"B", service="checkout", environment="prod"), DEFAULT)

    assert group_key(labels) == '{alertname="A\\"B",environment="prod",service="checkout"}'


def test_an_overlong_group_key_is_bounded_and_still_distinct() -> None:
    first = group_key({"alertname": "x" * 600})
    second = group_key({"alertname": "x" * 599 + "y"})

    assert len(first) <= 500 and len(second) <= 500
    assert first != second
