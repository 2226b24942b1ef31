"""Which incident an alert belongs to: the group key, as Alertmanager's ``group_by`` makes it.

Pure functions, in ``core`` because triage and the edge both use them (the edge marks a new
group's first alert urgent: :mod:`ira.sources.urgent`). The key is the sorted ``name="value"``
pairs of the configured labels, so two alerts with the same values for those labels share an
incident whatever else differs (instance, pod, fingerprint). A label the alert lacks counts as
the empty string, exactly as in Alertmanager. ``...`` groups by every label (one incident per
distinct label set).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence

from ira.core.alert import AlertEvent
from ira.core.limits import GROUP_KEY_MAX
from ira.core.replay import REPLAY_LABEL

ALL_LABELS = "..."
_HASHED_PREFIX = 400


def label_value(alert: AlertEvent, name: str) -> str:
    """The value of ``name`` for ``alert``; the normalized fields win over raw labels.

    Sources normalize ``service``, ``environment`` and ``severity`` from several label
    spellings (and source defaults), so grouping on them reads the normalized values.
    """
    if name == "alertname":
        value: str | None = alert.name
    elif name == "service":
        value = alert.service
    elif name == "environment":
        value = alert.environment
    elif name == "severity":
        value = alert.severity.value
    else:  # a plain label: no dict of the four built per call (the edge asks this per alert)
        return alert.labels.get(name, "")
    return value or alert.labels.get(name, "")


def group_labels(alert: AlertEvent, group_by: Sequence[str]) -> dict[str, str]:
    """The labels (and their values) that decide the group, sorted by name. A replay's alerts also
    group by their replay, so two replays of one bundle never join each other's incident."""
    names = set(alert.labels) | {"alertname"} if ALL_LABELS in group_by else set(group_by)
    if REPLAY_LABEL in alert.labels:
        names.add(REPLAY_LABEL)
    return {name: label_value(alert, name) for name in sorted(names)}


def group_key(labels: Mapping[str, str]) -> str:
    """``{alertname="X",service="Y"}``; over-long keys keep a readable head plus a digest."""
    pairs = ",".join(f'{name}="{_escape(value)}"' for name, value in sorted(labels.items()))
    key = "{" + pairs + "}"
    if len(key) <= GROUP_KEY_MAX:
        return key
    digest = hashlib.sha256(key.encode()).hexdigest()
    return f"{key[:_HASHED_PREFIX]}…#{digest}"


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"')
