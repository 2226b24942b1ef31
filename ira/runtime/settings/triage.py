"""The ``triage:`` section: grouping, the run threshold, quiet period, cooldown, noise, silences.

Kept in its own module (runtime may not import ``ira.triage``) and self-contained so that
``model.py`` can import it without a cycle.
"""

from __future__ import annotations

import re
from datetime import datetime, timedelta
from typing import Literal

from pydantic import AwareDatetime, Field, model_validator

from ira.core.alert import Severity
from ira.runtime.settings.section import NAME, Duration, Section

DEFAULT_GROUP_BY = ("alertname", "service", "environment")



class SilenceMatcher(Section):
    """One condition on an alert, as in Alertmanager: ``=``, ``!=``, ``=~``, ``!~`` (regex, full match).

    ``name`` is a label; ``alertname``, ``service``, ``environment`` and ``severity`` also read
    the alert's normalized fields.
    """

    name: str = Field(min_length=1)
    value: str
    op: Literal["=", "!=", "=~", "!~"] = "="

    @model_validator(mode="after")
    def _regex_compiles(self) -> SilenceMatcher:
        if self.op in ("=~", "!~"):
            try:
                re.compile(self.value)
            except re.error as exc:
                raise ValueError(f"matcher {self.name}{self.op}{self.value!r}: {exc}") from exc
        return self


class SilenceSettings(Section):
    """Alerts matching every matcher are ignored (reason ``silenced``) until ``expires_at``."""

    id: str = Field(pattern=NAME)
    matchers: tuple[SilenceMatcher, ...] = Field(min_length=1)
    expires_at: AwareDatetime
    starts_at: AwareDatetime | None = None
    """None: active from the start."""
    tenant: str | None = Field(default=None, pattern=NAME)
    """None: applies to every tenant."""
    comment: str = ""

    def is_active(self, now: datetime) -> bool:
        return (self.starts_at is None or self.starts_at <= now) and now < self.expires_at


class NoiseSettings(Section):
    """The windowed noise state (faust): flapping and alert storms per group key."""

    enabled: bool = True
    """Run the faust noise worker as a child of the triage role. Off: only the SQL cooldown applies."""
    window: Duration = timedelta(minutes=5)
    """Hopping window size: how far back transitions and arrivals are counted."""
    hop: Duration = timedelta(minutes=1)
    """Hopping window step (each event updates window/hop windows)."""
    flapping_transitions: int = Field(default=6, ge=2)
    """A group whose alerts changed firing<->resolved this often within the window is flapping."""
    storm_alerts: int = Field(default=100, ge=2)
    """A group that received this many alert events within the window is in a storm."""

    @model_validator(mode="after")
    def _hop_fits(self) -> NoiseSettings:
        if self.hop > self.window:
            raise ValueError("hop must not be longer than window")
        return self


class TriageSettings(Section):
    """How alerts become incidents and which of them start an investigation."""

    group_by: tuple[str, ...] = Field(default=DEFAULT_GROUP_BY, min_length=1)
    """Labels whose values form the group key (like Alertmanager's group_by; ``...`` = all labels)."""
    tenant_group_by: dict[str, tuple[str, ...]] = Field(default_factory=dict)
    """Per-tenant override of ``group_by``."""
    severity_threshold: Severity = Severity.WARNING
    """A new incident at or above this severity starts a run; below it is recorded, not investigated."""
    quiet_period: Duration = timedelta(minutes=5)
    """An incident closes this long after its last alert resolved (a re-fire inside it reopens it)."""
    cooldown: Duration = timedelta(minutes=30)
    """No new run for a group key within this long of its last run (SQL-enforced, faust or not)."""
    noise: NoiseSettings = NoiseSettings()
    silences: tuple[SilenceSettings, ...] = ()
    batch_size: int = Field(default=200, ge=1, le=5000)
    """Alert events applied per database transaction."""
    close_interval: Duration = timedelta(seconds=30)
    """How often incidents whose quiet period passed are closed."""
    update_interval: Duration = timedelta(seconds=10)
    """Follow-up alerts to an active run are folded into one incident update sent at most this often
    (at once when the incident is all resolved or its severity rose): the run's log and its draft
    move with the incident's changes, not with the alert volume."""

    def group_by_for(self, tenant_id: str) -> tuple[str, ...]:
        return self.tenant_group_by.get(tenant_id, self.group_by)
