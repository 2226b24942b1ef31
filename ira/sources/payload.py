"""What every source payload model shares: lenient base models, UTC datetimes, JSON parsing.

Payloads we do not own (Alertmanager, Grafana) ignore unknown fields, so a sender's new
version does not break ingest; schemas we own (generic, change) forbid them, so a typo is a
422 naming the field instead of a silently dropped value. Parsing and validation happen in
one pass (pydantic's JSON parser), and every failure becomes one of our errors: the route
never sees a pydantic exception, and a client never sees a 500.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Any, TypeVar

from pydantic import AfterValidator, AwareDatetime, ConfigDict, Field, TypeAdapter, ValidationError

from ira.core import limits
from ira.core.model import Model
from ira.sources.errors import InvalidPayloadError, MalformedPayloadError, Problem

T = TypeVar("T")
MAX_TEXT = limits.TEXT_MAX


class Payload(Model):
    """A sender's payload we do not own: unknown fields are ignored, not refused."""

    model_config = ConfigDict(extra="ignore", populate_by_name=True)


class OwnPayload(Model):
    """A payload whose schema ira defines: unknown fields are refused."""


def _utc(value: datetime) -> datetime:
    """Normalise to UTC; an instant outside the representable range is a validation error."""
    try:
        return value.astimezone(UTC)
    except (OverflowError, ValueError) as exc:
        raise ValueError("datetime out of range once converted to UTC") from exc


UtcDatetime = Annotated[AwareDatetime, AfterValidator(_utc)]
"""A timezone-aware instant, converted to UTC (``+08:00`` and ``Z`` spellings compare equal)."""

Text = Annotated[str, Field(max_length=limits.TEXT_MAX)]
Labels = Annotated[dict[Annotated[str, Field(max_length=limits.LABEL_NAME_MAX)], Text],
                   Field(max_length=limits.LABELS_MAX)]
"""Labels or annotations: bounded in count, name and value (``ira.core.limits``)."""
Fingerprint = Annotated[str, Field(max_length=limits.FINGERPRINT_MAX)]

ZERO_TIME_YEAR = 1
"""Alertmanager writes ``0001-01-01T00:00:00Z`` for "not ended yet"."""


def ended(value: datetime | None) -> datetime | None:
    """``endsAt`` as ira keeps it: Go's zero time means the alert has not ended."""
    return None if value is None or value.year == ZERO_TIME_YEAR else value


def parse(adapter: TypeAdapter[T], body: bytes) -> T:
    """Parse and validate ``body``; MalformedPayloadError (400) or InvalidPayloadError (422)."""
    try:
        return adapter.validate_json(body)
    except ValidationError as exc:
        raise _translated(exc.errors(include_url=False, include_input=False)) from exc


def _translated(errors: list[Any]) -> MalformedPayloadError | InvalidPayloadError:
    if any(e["type"] == "json_invalid" for e in errors):
        message = next(e["msg"] for e in errors if e["type"] == "json_invalid")
        return MalformedPayloadError(message)
    return InvalidPayloadError([_problem(e) for e in errors])


def _problem(error: Any) -> Problem:
    """One pydantic error as ``{code, message, field}``; the input is never echoed (may be secret)."""
    path = ".".join(str(p) for p in ("body", *error["loc"]))
    return Problem(code=error["type"], message=error["msg"], field=path)
