"""Variants of a scenario: other names, days, magnitudes, onsets and noise, from a seed.

The thirteen worlds were written next to the rules; a variant keeps each world's story (what
causes what, in which order) and changes everything a rule could have been fitted to: every
service and dependency name (in metrics, logs, changes, runbooks and the expectations), the
date and hour, how far each signal moves, when the incident starts and how noisy it is.
"""

from __future__ import annotations

import dataclasses
import random
import re
from datetime import timedelta

from ira.infra.scenarios.world import Curve, Expected, LogStream, Scenario

NAMES = ("atlas", "birch", "cobalt", "delta", "ember", "fjord", "garnet", "harbor", "iris", "juniper", "krypton",
         "lumen", "meadow", "nimbus", "onyx", "prism", "quartz", "raven", "sierra", "tundra")
KINDS = ("api", "svc", "gateway", "worker", "service", "backend")


def vary(s: Scenario, seed: int) -> Scenario:
    rng = random.Random(f"{s.bundle_id}:{seed}")
    names = _names(s, rng)
    spread, shift = rng.uniform(0.9, 1.3), rng.uniform(-2.0, 2.0)
    noise = rng.uniform(0.6, 1.6)
    return dataclasses.replace(
        s, bundle_id=f"{s.bundle_id}-v{seed}", service=_rename(s.service, names),
        summary=_rename(s.summary, names), description=_rename(s.description, names),
        alert_name=_alert(s, names),
        alert_at=s.alert_at + timedelta(days=rng.randint(-200, 200), minutes=rng.randint(0, 1439)),
        dependencies=tuple(_rename(d, names) for d in s.dependencies),
        metrics={(_rename(svc, names), key): _curve(c, spread, shift, noise) for (svc, key), c in s.metrics.items()},
        versions=tuple((v, m + shift) for v, m in s.versions),
        logs=[_stream(x, names, shift) for x in s.logs],
        changes=[dataclasses.replace(c, minute=c.minute + shift, description=_rename(c.description, names),
                                     service=_rename(c.service, names) if c.service else None) for c in s.changes],
        runbooks={name: _rename(text, names).replace(s.alert_name, _alert(s, names))
                  for name, text in s.runbooks.items()},
        expected=Expected(cause=tuple(_rename(p, names) for p in s.expected.cause),
                          cite=tuple(_rename(p, names) for p in s.expected.cite), outcome=s.expected.outcome,
                          rival=tuple(_rename(p, names) for p in s.expected.rival)))


def _alert(s: Scenario, names: dict[str, str]) -> str:
    camel = _camel(s.service)
    return f"{_camel(_rename(s.service, names))}{s.alert_name[len(camel):]}" if s.alert_name.startswith(camel) \
        else s.alert_name


def _names(s: Scenario, rng: random.Random) -> dict[str, str]:
    pool = list(NAMES)
    rng.shuffle(pool)
    old = [s.service, *s.dependencies]
    return {name: f"{pool[i]}-{rng.choice(KINDS) if i == 0 else name.split('-')[-1]}" for i, name in enumerate(old)}


def _rename(text: str, names: dict[str, str]) -> str:
    for old, new in sorted(names.items(), key=lambda kv: -len(kv[0])):
        text = re.sub(rf"(?<![\w-]){re.escape(old)}(?![\w])", new, text)
    return text


def _camel(service: str) -> str:
    return "".join(part.capitalize() for part in service.split("-"))


def _curve(c: Curve, spread: float, shift: float, noise: float) -> Curve:
    onset = None if c.onset is None else c.onset + shift
    if c.peak is None or c.shape in ("flap", "counter"):
        return dataclasses.replace(c, onset=onset, noise=c.noise * noise)
    peak = c.base + (c.peak - c.base) * spread
    if c.base <= 1.0 and c.peak <= 1.05:  # a ratio stays a ratio
        peak = min(peak, max(c.peak, 1.0))
    return dataclasses.replace(c, peak=peak, onset=onset, noise=c.noise * noise)


def _stream(x: LogStream, names: dict[str, str], shift: float) -> LogStream:
    since = x.since + shift if x.since > -60 else x.since
    until = x.until + shift if x.until < 10 else x.until
    return dataclasses.replace(x, template=_rename(x.template, names), since=since, until=until)

