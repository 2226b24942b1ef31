"""What the store can hold, said once: the edge refuses what does not fit, and the tables are
declared with the same numbers. A value the webhook answered 202 for must never be refused by
a column later (it would be accepted data lost, dead-lettered inside triage).
"""

from __future__ import annotations

from collections.abc import Iterable

ALERT_NAME_MAX = 200
"""An alert's name (``alertname``, a Grafana rule title)."""
SERVICE_MAX = 200
ENVIRONMENT_MAX = 64
VERSION_MAX = 200
COMMIT_MAX = 100
ACTOR_MAX = 200
TITLE_MAX = 300
"""An incident's title (derived from the alert name and service; cut to fit, never refused)."""

NUL = "\x00"
"""PostgreSQL cannot store it in text or JSON; SQLite can. Refused at the edge, on every backend."""


def too_long(value: str | None, limit: int) -> bool:
    return value is not None and len(value) > limit


def has_nul(values: Iterable[str | None]) -> bool:
    return any(v is not None and NUL in v for v in values)
