"""Deploy and config change events: context investigators line up with symptoms.

The body is one change or a JSON list of them, each::

    {"service": "order-service",      # required
     "at": "2026-04-29T10:31:00Z",     # when the change took effect, required
     "environment": "prod",            # optional: the source's default_environment otherwise
     "version": "v2.14.0", "commit": "9f2c1e4", "actor": "deploy-bot",
     "url": "https://ci.example/runs/4411", "description": "canary 100%",
     "id": "deploy-4411"}              # optional: the sender's id of the change

Identity: ``id`` when given, else a hash of service, environment, version, commit and
``at``, so the same deploy reported twice is one event.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field, TypeAdapter

from ira.core import limits
from ira.core.alert import ChangeEvent
from ira.sources.context import SourceContext
from ira.sources.errors import InvalidPayloadError, Problem
from ira.sources.generic import ID_PATTERN, is_list
from ira.sources.identity import content_id
from ira.sources.payload import MAX_TEXT, OwnPayload, UtcDatetime, parse


def _short(limit: int) -> Any:
    """An optional short value that fits its column (``ira.core.limits``), without a NUL."""
    return Field(default=None, min_length=1, max_length=limit, pattern=_NO_NUL)


_NO_NUL = r"^[^\x00]*$"


class ChangePayload(OwnPayload):
    """One deploy or configuration change."""

    service: str = Field(min_length=1, max_length=limits.SERVICE_MAX, pattern=_NO_NUL)
    at: UtcDatetime
    environment: str | None = _short(limits.ENVIRONMENT_MAX)
    version: str | None = _short(limits.VERSION_MAX)
    commit: str | None = _short(limits.COMMIT_MAX)
    actor: str | None = _short(limits.ACTOR_MAX)
    url: str | None = Field(default=None, max_length=MAX_TEXT, pattern=_NO_NUL)
    description: str | None = Field(default=None, max_length=MAX_TEXT, pattern=_NO_NUL)
    id: str | None = Field(default=None, pattern=ID_PATTERN)


_ONE = TypeAdapter(ChangePayload)
_MANY = TypeAdapter(list[ChangePayload])


def events(body: bytes, ctx: SourceContext) -> list[ChangeEvent]:
    """Parse one change or a list (400/422 on bad input) and return them in order."""
    many = is_list(body)
    items = parse(_MANY, body) if many else [parse(_ONE, body)]
    paths = [f"body.{position}" for position in range(len(items))] if many else ["body"]
    missing = [Problem("missing", "no environment, and the source has no default_environment", f"{path}.environment")
               for item, path in zip(items, paths, strict=True) if not (item.environment or ctx.default_environment)]
    if missing:
        raise InvalidPayloadError(missing)
    return [normalize(item, ctx) for item in items]


def normalize(item: ChangePayload, ctx: SourceContext) -> ChangeEvent:
    """The ChangeEvent; InvalidPayloadError when neither the change nor the source names an environment."""
    environment = item.environment or ctx.default_environment
    if environment is None:
        raise InvalidPayloadError([Problem("missing", "no environment", "body.environment")])
    source_event_id = item.id or content_id(item.service, environment, item.version, item.commit, item.at.isoformat())
    return ctx.change(source_event_id=source_event_id, service=item.service, environment=environment,
                      at=item.at, version=item.version, commit=item.commit, actor=item.actor, url=item.url,
                      description=item.description)
