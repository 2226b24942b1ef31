"""What an alert's labels say about it: severity, environment, service. Pure functions.

Senders spell severities many ways (Prometheus rules write ``page``, ``crit``, ``P1``...);
ira keeps four levels. A value nobody recognised maps to ``warning``, never dropped and
never escalated: an unknown severity should still reach a person, but not page them as
critical. The original label is kept in ``labels["severity"]``.
"""

from __future__ import annotations

from collections.abc import Mapping

from ira.core.alert import Severity

SEVERITY_ALIASES: Mapping[str, Severity] = {
    **dict.fromkeys(("critical", "crit", "page", "fatal", "emergency", "emerg", "alert", "disaster",
                     "p1", "sev1", "sev-1", "s1"), Severity.CRITICAL),
    **dict.fromkeys(("high", "error", "err", "major", "p2", "sev2", "sev-2", "s2"), Severity.HIGH),
    **dict.fromkeys(("warning", "warn", "minor", "medium", "average", "p3", "sev3", "sev-3", "s3"),
                    Severity.WARNING),
    **dict.fromkeys(("info", "informational", "information", "notice", "low", "none", "ok", "debug",
                     "p4", "p5", "sev4", "sev-4", "sev5", "s4", "s5"), Severity.INFO),
}
"""Lower-cased, stripped label value -> ira's severity."""

UNKNOWN_SEVERITY = Severity.WARNING
ENVIRONMENT_LABELS = ("environment", "env")
SERVICE_LABELS = ("service", "job")


def severity_of(value: str | None) -> Severity:
    """Map a sender's severity to ira's four levels; unknown or missing -> ``warning``."""
    if value is None:
        return UNKNOWN_SEVERITY
    return SEVERITY_ALIASES.get(value.strip().lower(), UNKNOWN_SEVERITY)


def first_label(labels: Mapping[str, str], names: tuple[str, ...]) -> str | None:
    """The first non-empty value among ``names``, in that order of preference."""
    for name in names:  # a loop, not next(genexpr): asked twice per alert, the generator cost more than the lookups
        value = labels.get(name)
        if value:
            return value
    return None


def environment_of(labels: Mapping[str, str], default: str | None) -> str | None:
    """``environment`` or ``env`` label, else the source's configured default."""
    return first_label(labels, ENVIRONMENT_LABELS) or default


def service_of(labels: Mapping[str, str]) -> str | None:
    """``service`` label, else Prometheus's ``job``."""
    return first_label(labels, SERVICE_LABELS)
