"""The pieces a generated incident is made of: metric curves, log streams, changes, runbooks.

A scenario describes a small world (a service, what it depends on, what its Prometheus has,
what it logs, what changed) in minutes relative to the alert's start; ``bundle.write_bundle``
turns it into ira's bundle format as a recording of that world would. Deterministic: every
random choice comes from the scenario's own seeded ``random.Random``.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from datetime import datetime, timedelta

STEP = timedelta(seconds=15)


@dataclass(frozen=True)
class Curve:
    """A metric over the window: ``base`` until ``onset`` (minutes from the alert's start), then
    a ``step`` to ``peak``, a ``ramp`` reaching it at the window's end, or a ``flap`` around ``base``
    of amplitude ``peak``; ``counter`` adds ``peak`` increments spread after onset."""

    base: float
    peak: float | None = None
    onset: float | None = None
    shape: str = "step"
    noise: float = 0.04

    def points(self, rng: random.Random, start: datetime, end: datetime, alert_at: datetime
               ) -> tuple[tuple[datetime, float], ...]:
        found, at, total = [], start, (end - start).total_seconds()
        while at <= end:
            minute = (at - alert_at).total_seconds() / 60
            found.append((at, round(self._value(rng, minute, (at - start).total_seconds() / total), 6)))
            at += STEP
        return tuple(found)

    def _value(self, rng: random.Random, minute: float, share: float) -> float:
        jitter = 1 + rng.uniform(-self.noise, self.noise)
        if self.shape == "flap":
            return max(self.base + (self.peak or 0) * rng.uniform(-1, 1), 0)
        if self.onset is None or self.peak is None or minute < self.onset:
            return self.base if self.shape == "counter" else self.base * jitter
        if self.shape == "counter":
            return self.base + min(self.peak, int((minute - self.onset) / 2) + 1)
        if self.shape == "ramp":
            left = max(2.0 - self.onset, 0.1)  # minutes from onset to the window's end
            return (self.base + (self.peak - self.base) * min((minute - self.onset) / left, 1)) * jitter
        return self.peak * jitter


@dataclass(frozen=True)
class LogStream:
    """Lines of one shape: ``per_minute`` from minute ``since`` to ``until``; ``{id}``, ``{n}``,
    ``{ms}`` in the template are filled with fresh values per line."""

    level: str
    template: str
    per_minute: float
    since: float = -60.0
    until: float = 10.0

    def lines(self, rng: random.Random, alert_at: datetime, start: datetime, end: datetime
              ) -> list[tuple[datetime, str, str]]:
        found = []
        minute = max(self.since, (start - alert_at).total_seconds() / 60)
        stop = min(self.until, (end - alert_at).total_seconds() / 60)
        while self.per_minute > 0 and minute < stop:
            minute += rng.expovariate(self.per_minute)
            if minute < stop:
                found.append((alert_at + timedelta(minutes=minute), self.level, self._fill(rng)))
        return found

    def _fill(self, rng: random.Random) -> str:
        return self.template.format(id=f"{rng.getrandbits(48):012x}", n=rng.randint(1, 9999),
                                    ms=rng.choice((1500, 2000, 3000, 5000)) + rng.randint(0, 99))


@dataclass(frozen=True)
class ChangeAt:
    minute: float
    """Minutes from the alert's start (negative: before)."""
    version: str | None
    description: str
    actor: str = "deploy-bot"
    commit: str | None = None
    service: str | None = None
    """Another service's change (None: the alerting service)."""


@dataclass(frozen=True)
class Expected:
    """What a correct investigation concludes, checked by ``bench/investigation.py``."""

    cause: tuple[str, ...]
    """Regexes the top hypothesis must all match (case-insensitive)."""
    cite: tuple[str, ...]
    """Regexes that must each match the summary of some evidence the top hypothesis cites."""
    outcome: str = "cause"
    """``cause`` (one cause stands out), ``conflict`` (two causes side by side, neither confirmed),
    ``noise`` (no fault found: the alert flaps around its threshold)."""
    rival: tuple[str, ...] = ()
    """For ``conflict``: regexes the second-ranked hypothesis must match."""


@dataclass
class Scenario:
    kind: str
    bundle_id: str
    service: str
    alert_name: str
    summary: str
    description: str
    alert_at: datetime
    expected: Expected
    team: str = "platform"
    severity: str = "critical"
    version: str | None = None
    dependencies: tuple[str, ...] = ()
    dependencies_in_alert: bool = False
    """Declared in the alert's ``depends_on`` annotation rather than in the service catalog."""
    metrics: dict[tuple[str, str], Curve] = field(default_factory=dict)
    """(service, signal key) -> curve; keys are catalog families or RED names (``latency_p95``)."""
    extra_metrics: tuple[str, ...] = ()
    """Metric names the service also has that no query asks for (discovery lists them)."""
    versions: tuple[tuple[str, float], ...] = ()
    """(version, minute it was first seen) of the alerting service."""
    logs: list[LogStream] = field(default_factory=list)
    changes: list[ChangeAt] = field(default_factory=list)
    runbooks: dict[str, str] = field(default_factory=dict)
    """file name -> markdown."""
    injected: tuple[str, ...] = ()
    """Regexes of what the injected instructions ask for; no hypothesis may contain them."""
    window_before: timedelta = timedelta(minutes=30)
