"""What every settings section shares: the base model, durations people can write, names."""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field

_UNITS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400}
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)\s*$")
NAME = r"^[a-z0-9][a-z0-9_.-]{0,62}$"
"""Ids of tenants, sources, providers: lower case, safe in URLs, keys and topic names."""


def parse_duration(value: Any) -> Any:
    """People write ``15m``; anything else goes on to pydantic (seconds, ISO 8601)."""
    if isinstance(value, str) and (match := _DURATION.match(value)):
        return timedelta(seconds=float(match[1]) * _UNITS[match[2]])
    return value


Duration = Annotated[timedelta, BeforeValidator(parse_duration), Field(gt=timedelta(0))]


class Section(BaseModel):
    """A settings section: immutable, unknown keys are errors (a typo never passes silently)."""

    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)
