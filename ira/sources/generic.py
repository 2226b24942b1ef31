"""The generic alert schema ira defines, for senders that are neither Alertmanager nor Grafana.

The body is one event or a JSON list of them, each::

    {"id": "db-disk-full-7",          # the alert's own id, stable across its states (fingerprint)
     "title": "Disk almost full",      # the alert's name
     "status": "firing",               # firing | resolved
     "starts_at": "2026-04-29T10:37:00Z",
     "severity": "critical",           # optional; unknown -> warning
     "ends_at": null,                  # optional
     "labels": {"service": "db", "environment": "prod"},
     "annotations": {"summary": "..."},
     "links": [{"url": "https://...", "title": "dashboard"}]}

Requests are signed (see ``ira.sources.auth``). ``id`` + ``status`` + ``starts_at`` is the
alert state's identity, so re-sending the same state is dropped as a duplicate and a new
firing (a new ``starts_at``) is a new event. The first link becomes the event's
``generator_url``; every link is also kept as an annotation ``link.<title or position>``.
"""

from __future__ import annotations

from pydantic import Field, TypeAdapter

from ira.core import limits
from ira.core.alert import AlertEvent, AlertStatus
from ira.sources.context import SourceContext
from ira.sources.payload import Labels, OwnPayload, Text, UtcDatetime, parse

ID_PATTERN = rf"^[A-Za-z0-9._:/@-]{{1,{limits.FINGERPRINT_MAX}}}$"


class GenericLink(OwnPayload):
    url: Text = Field(min_length=1)
    title: str | None = Field(default=None, max_length=limits.ALERT_NAME_MAX)


class GenericEvent(OwnPayload):
    """One alert state, as the documented generic schema describes it."""

    id: str = Field(pattern=ID_PATTERN)
    """The alert's id, stable across its states; used as its fingerprint."""
    title: Text = Field(min_length=1)
    status: AlertStatus
    starts_at: UtcDatetime
    ends_at: UtcDatetime | None = None
    severity: str | None = Field(default=None, max_length=64)
    labels: Labels = Field(default_factory=dict)
    annotations: Labels = Field(default_factory=dict)
    links: list[GenericLink] = Field(default_factory=list, max_length=50)


_ONE = TypeAdapter(GenericEvent)
_MANY = TypeAdapter(list[GenericEvent])


def is_list(body: bytes) -> bool:
    """Whether the JSON document is an array (decided by its first significant byte)."""
    return body.lstrip(b" \t\r\n")[:1] == b"["


def events(body: bytes, ctx: SourceContext) -> list[AlertEvent]:
    """Parse one event or a list (400/422 on bad input) and return them in order."""
    if is_list(body):
        items: list[GenericEvent] = parse(_MANY, body)
        return [normalize(item, ctx, at=f"body.{i}") for i, item in enumerate(items)]
    return [normalize(parse(_ONE, body), ctx)]


def normalize(item: GenericEvent, ctx: SourceContext, *, at: str = "body") -> AlertEvent:
    links = {f"link.{link.title or position}": link.url for position, link in enumerate(item.links)}
    return ctx.alert(fingerprint=item.id, status=item.status, labels=item.labels,
                     annotations={**links, **item.annotations}, starts_at=item.starts_at, ends_at=item.ends_at,
                     generator_url=item.links[0].url if item.links else None, name=item.title,
                     severity=item.severity or item.labels.get("severity"), at=at)
