"""Moving a recorded incident in time: every ISO-8601 timestamp inside a JSON value, by one shift.

A replay happens now, so what was recorded (webhook bodies, a model's tool-call arguments) is
moved by ``now - recorded end``; everything that is not a timestamp is left alone.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from typing import Any

_ISO = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:\d{2})$")
_ZERO_TIME = "0001-01-01T00:00:00Z"  # Alertmanager's "no end yet"


def retime(value: Any, shift: timedelta) -> Any:
    """Move every ISO-8601 timestamp inside ``value`` by ``shift``; leave everything else."""
    if isinstance(value, dict):
        return {k: retime(v, shift) for k, v in value.items()}
    if isinstance(value, list):
        return [retime(v, shift) for v in value]
    if isinstance(value, str) and value != _ZERO_TIME and _ISO.match(value):
        moved = datetime.fromisoformat(value.replace("Z", "+00:00")) + shift
        return moved.astimezone(UTC).isoformat().replace("+00:00", "Z")
    return value
