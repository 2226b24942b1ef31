"""Grafana unified alerting's webhook payload and its normalization.

Grafana's contact point "webhook" sends an Alertmanager-shaped body (it embeds Alertmanager)
plus its own extras: ``orgId``, ``title``, ``state``, ``message``, and per alert
``dashboardURL``, ``panelURL``, ``silenceURL`` and the query ``values``. The dashboard and
panel links are kept as annotations (``dashboard_url``, ``panel_url``) unless the rule set
those annotations itself: they are where an investigator looks first.
"""

from __future__ import annotations

from pydantic import Field, TypeAdapter

from ira.core.alert import AlertEvent, AlertStatus
from ira.sources.context import SourceContext
from ira.sources.payload import Fingerprint, Labels, Payload, Text, UtcDatetime, ended, parse


class GrafanaAlert(Payload):
    """One alert instance of the notification."""

    status: AlertStatus
    labels: Labels
    annotations: Labels = Field(default_factory=dict)
    starts_at: UtcDatetime = Field(alias="startsAt")
    ends_at: UtcDatetime | None = Field(default=None, alias="endsAt")
    generator_url: Text = Field(default="", alias="generatorURL")
    fingerprint: Fingerprint | None = None
    dashboard_url: Text = Field(default="", alias="dashboardURL")
    panel_url: Text = Field(default="", alias="panelURL")
    silence_url: Text = Field(default="", alias="silenceURL")
    values: dict[str, float | None] | None = None


class GrafanaWebhook(Payload):
    """The webhook body (Grafana's payload ``version`` "1")."""

    status: AlertStatus | None = None
    receiver: Text = ""
    org_id: int | None = Field(default=None, alias="orgId")
    title: Text = ""
    state: Text = ""
    message: Text = ""
    alerts: list[GrafanaAlert]


_ADAPTER = TypeAdapter(GrafanaWebhook)


def events(body: bytes, ctx: SourceContext) -> list[AlertEvent]:
    """Parse a webhook body (400/422 on bad input) and return one event per alert."""
    return normalize(parse(_ADAPTER, body), ctx)


def normalize(webhook: GrafanaWebhook, ctx: SourceContext) -> list[AlertEvent]:
    """One AlertEvent per alert instance, in payload order."""
    return [
        ctx.alert(fingerprint=alert.fingerprint, status=alert.status, labels=alert.labels,
                  annotations=_annotations(alert), starts_at=alert.starts_at, ends_at=ended(alert.ends_at),
                  generator_url=alert.generator_url, at=f"body.alerts.{i}")
        for i, alert in enumerate(webhook.alerts)
    ]


def _annotations(alert: GrafanaAlert) -> dict[str, str]:
    links = {"dashboard_url": alert.dashboard_url, "panel_url": alert.panel_url}
    return {**{k: v for k, v in links.items() if v}, **alert.annotations}
