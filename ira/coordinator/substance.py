"""What of an incident a ticket draft is about: its substance. Pure functions.

A run hears about its incident through coalesced updates (counts, joined and resolved alerts,
first/last seen); most of that is the incident's weather, not news for the ticket. The draft
states which alerts the incident is made of and how severe it is, so only a change of those
— a new alert name joined, the severity rose — is a change of the draft's *substance*: it
revises the draft and asks for the approval again (the approval binds the incident version of
the last substantive change). Another alert of a known name, a resolve, a re-fire, an
all-resolved are recorded on the run's log and leave the draft and its approval standing, so a
flapping alert or a storm of one alert name yields one draft.
"""

from __future__ import annotations

from collections.abc import Mapping

from ira.core.alert import SEVERITY_RANK, Severity
from ira.core.decision import IncidentChanges
from ira.core.model import Model

NAMES_KEPT = 50
"""Alert names a run's substance lists; past that, more distinct names are no longer news."""


class Substance(Model):
    """The incident as the run's draft states it."""

    severity: Severity
    alerts: tuple[str, ...]
    """The distinct alert names of the incident, sorted."""


def initial(bindings: Mapping[str, object]) -> Substance:
    """The incident as the run was accepted for it (its run bindings)."""
    severity = str(bindings.get("severity") or Severity.WARNING.value)
    name = bindings.get("alert_name")
    return Substance(severity=Severity(severity) if severity in Severity._value2member_map_ else Severity.WARNING,
                     alerts=(str(name),) if name else ())


def after(current: Substance, changes: IncidentChanges) -> Substance:
    """``current`` with what an update says: new alert names joined, a higher severity."""
    names = set(current.alerts)
    for name in changes.names_joined:
        if len(names) >= NAMES_KEPT:
            break
        names.add(name)
    severity = changes.severity if SEVERITY_RANK[changes.severity] > SEVERITY_RANK[current.severity] \
        else current.severity
    return Substance(severity=severity, alerts=tuple(sorted(names)))


def notes(before: Substance, now: Substance) -> list[str]:
    """What changed, as the lines a revised draft gains under its update heading."""
    lines = []
    if now.severity != before.severity:
        lines.append(f"Severity raised from {before.severity.value} to {now.severity.value}")
    joined = [name for name in now.alerts if name not in before.alerts]
    if joined:
        lines.append(f"Alerts joined the incident: {', '.join(joined)}")
    return lines
