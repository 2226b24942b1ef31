"""Alertmanager's webhook payload (version 4) and its normalization: N alerts -> N events.

What Alertmanager sends (``notify/webhook``): the group's receiver, status, common labels
and ``alerts``, each with its own status, labels, annotations, ``startsAt``, ``endsAt``
(Go's zero time while firing), ``generatorURL`` and ``fingerprint``. Only what ira needs is
required; unknown fields are ignored so a newer Alertmanager keeps working.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, TypeAdapter

from ira.core.alert import AlertEvent, AlertStatus
from ira.sources.context import SourceContext
from ira.sources.payload import Fingerprint, Labels, Payload, Text, UtcDatetime, ended, parse


class AlertmanagerAlert(Payload):
    """One alert of the group, in the state Alertmanager saw it when it notified."""

    status: AlertStatus
    labels: Labels
    annotations: Labels = Field(default_factory=dict)
    starts_at: UtcDatetime = Field(alias="startsAt")
    ends_at: UtcDatetime | None = Field(default=None, alias="endsAt")
    generator_url: Text = Field(default="", alias="generatorURL")
    fingerprint: Fingerprint | None = None
    """Alertmanager's label-set hash; computed from ``labels`` when absent."""


class AlertmanagerWebhook(Payload):
    """The webhook body, version 4."""

    version: Literal["4"] = "4"
    status: AlertStatus | None = None
    receiver: Text = ""
    group_key: Text = Field(default="", alias="groupKey")
    truncated_alerts: int = Field(default=0, alias="truncatedAlerts")
    external_url: Text = Field(default="", alias="externalURL")
    alerts: list[AlertmanagerAlert]


_ADAPTER = TypeAdapter(AlertmanagerWebhook)


def events(body: bytes, ctx: SourceContext) -> list[AlertEvent]:
    """Parse a webhook body (400/422 on bad input) and return one event per alert."""
    return normalize(parse(_ADAPTER, body), ctx)


def normalize(webhook: AlertmanagerWebhook, ctx: SourceContext) -> list[AlertEvent]:
    """One AlertEvent per alert, in payload order; labels, annotations and generatorURL kept."""
    return [
        ctx.alert(fingerprint=alert.fingerprint, status=alert.status, labels=alert.labels,
                  annotations=alert.annotations, starts_at=alert.starts_at, ends_at=ended(alert.ends_at),
                  generator_url=alert.generator_url, at=f"body.alerts.{i}")
        for i, alert in enumerate(webhook.alerts)
    ]
