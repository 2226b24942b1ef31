"""Silences: configured matchers with an id and an expiry. Pure functions.

A silence applies to an alert when it is active at the time of the decision, belongs to the
alert's tenant (or to every tenant) and all of its matchers hold — Alertmanager's semantics,
so a silence written for Alertmanager reads the same here. The silence's id goes into the
evaluation's basis, so "why was this ignored" always names the silence that did it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from datetime import datetime

from ira.core.alert import AlertEvent
from ira.core.grouping import label_value
from ira.runtime.settings.triage import SilenceMatcher, SilenceSettings


def matcher_holds(matcher: SilenceMatcher, value: str) -> bool:
    """One matcher against one value; regexes must match the whole value, as in Alertmanager."""
    if matcher.op == "=":
        return value == matcher.value
    if matcher.op == "!=":
        return value != matcher.value
    matched = re.fullmatch(matcher.value, value) is not None
    return matched if matcher.op == "=~" else not matched


def silences_alert(silence: SilenceSettings, alert: AlertEvent, now: datetime) -> bool:
    """True when ``silence`` is active at ``now``, covers the tenant and every matcher holds."""
    if not silence.is_active(now) or silence.tenant not in (None, alert.tenant_id):
        return False
    return all(matcher_holds(m, label_value(alert, m.name)) for m in silence.matchers)


def find_silence(silences: Iterable[SilenceSettings], alert: AlertEvent, now: datetime) -> SilenceSettings | None:
    """The first configured silence that applies to ``alert`` at ``now``, if any."""
    return next((s for s in silences if silences_alert(s, alert, now)), None)
