"""The source a payload came from, and the one way every kind builds its events.

Normalizers are pure: they get the payload and this context (who sent it, when it arrived)
and return events. Identity, severity, environment and service are decided here once, so
an Alertmanager alert and a Grafana alert with the same labels are described the same way.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime

from ira.core import limits
from ira.core.alert import AlertEvent, AlertStatus, ChangeEvent, SourceKind
from ira.sources import identity
from ira.sources.errors import InvalidPayloadError, Problem
from ira.sources.labels import ENVIRONMENT_LABELS, SERVICE_LABELS, environment_of, service_of, severity_of

UNNAMED = "unnamed"
"""The name of an alert that carries no ``alertname`` label and no title."""
FITTED = frozenset({SourceKind.ALERTMANAGER, SourceKind.GRAFANA})
"""Payloads ira does not own: what a column cannot hold is cut to fit (or a NUL replaced), never
refused, since Alertmanager drops a refused group without retrying (``ira.core.limits``)."""


@dataclass(frozen=True)
class SourceContext:
    """Who sent the payload and when it arrived (the same for every event of one request)."""

    tenant_id: str
    source_id: str
    source_kind: SourceKind
    received_at: datetime
    default_environment: str | None = None

    def alert(
        self,
        *,
        fingerprint: str | None,
        status: AlertStatus,
        labels: Mapping[str, str],
        annotations: Mapping[str, str],
        starts_at: datetime,
        ends_at: datetime | None = None,
        generator_url: str | None = None,
        name: str | None = None,
        severity: str | None = None,
        at: str = "body",
    ) -> AlertEvent:
        """One AlertEvent; ``fingerprint`` None -> computed from the labels like Alertmanager does.
        ``at``: where the alert sits in the payload, for the 422 that names a value the store
        could not hold (InvalidPayloadError)."""
        fitted = self.source_kind in FITTED
        if fitted:
            labels, annotations = limits.mapping_without_nul(labels), limits.mapping_without_nul(annotations)
            generator_url = limits.without_nul(generator_url) if generator_url else generator_url
        name = name or labels.get("alertname") or UNNAMED
        environment, service = environment_of(labels, self.default_environment), service_of(labels)
        if fitted:  # fitted and without NUL: nothing is left for ``unstorable`` to find
            name, service = limits.fit(name, limits.ALERT_NAME_MAX), limits.fit_optional(service, limits.SERVICE_MAX)
            environment = limits.fit_optional(environment, limits.ENVIRONMENT_MAX)
        else:
            problems = unstorable(at, labels=labels, annotations=annotations, generator_url=generator_url,
                                  name=name, service=service, environment=environment)
            if problems:
                raise InvalidPayloadError(problems)
        fingerprint = fingerprint or identity.label_fingerprint(labels)
        source_event_id = identity.state_id(fingerprint, status.value, starts_at)
        return AlertEvent(
            event_id=identity.event_id(self.tenant_id, self.source_id, source_event_id),
            tenant_id=self.tenant_id, source_id=self.source_id, source_kind=self.source_kind,
            source_event_id=source_event_id, fingerprint=fingerprint, status=status,
            name=name,
            severity=severity_of(severity if severity is not None else labels.get("severity")),
            labels=labels, annotations=annotations, starts_at=starts_at, ends_at=ends_at,
            generator_url=generator_url or None, received_at=self.received_at,
            environment=environment, service=service,
        )

    def change(
        self,
        *,
        source_event_id: str,
        service: str,
        environment: str,
        at: datetime,
        version: str | None = None,
        commit: str | None = None,
        actor: str | None = None,
        url: str | None = None,
        description: str | None = None,
    ) -> ChangeEvent:
        """One ChangeEvent, identified like an alert state: the same change re-sent is one event."""
        return ChangeEvent(
            event_id=identity.event_id(self.tenant_id, self.source_id, source_event_id),
            tenant_id=self.tenant_id, source_id=self.source_id, source_event_id=source_event_id,
            service=service, environment=environment, at=at, received_at=self.received_at,
            version=version, commit=commit, actor=actor, url=url, description=description,
        )


def unstorable(at: str, *, labels: Mapping[str, str], annotations: Mapping[str, str], generator_url: str | None,
               name: str, service: str | None, environment: str | None) -> list[Problem]:
    """What in one alert the store could not hold: a NUL anywhere, or a name, service or
    environment longer than its column (``ira.core.limits``). For a schema ira owns (generic)
    these are refused with 422 naming the field; a payload ira does not own has been fitted
    before (nothing is left to refuse)."""
    problems = []
    if limits.has_nul([*labels, *labels.values(), *annotations, *annotations.values(), generator_url]):
        problems.append(Problem("nul_character", "labels, annotations and URLs cannot hold a NUL character", at))
    for what, value, limit, names, own in (
            ("name", name, limits.ALERT_NAME_MAX, ("alertname",), "title"),
            ("service", service, limits.SERVICE_MAX, SERVICE_LABELS, "service"),
            ("environment", environment, limits.ENVIRONMENT_MAX, ENVIRONMENT_LABELS, "environment")):
        if limits.too_long(value, limit):
            label = next((n for n in names if labels.get(n) == value), None)
            problems.append(Problem("too_long", f"the alert's {what} is longer than {limit} characters",
                                    f"{at}.labels.{label}" if label else f"{at}.{own}"))
    return problems
