"""What read-only connectors hand the investigators: metric series, log lines, runbooks, changes.

These are the typed models of the ports in :mod:`ira.core.ports` (``MetricSource``,
``LogSource``, ``RunbookSource``, ``ChangeSource``). Adapters translate their system's
payloads into these once, at the seam, so agents never see a vendor's JSON.
"""

from __future__ import annotations

from enum import StrEnum

from pydantic import AwareDatetime, Field

from ira.core.model import Model


class RetryContract(Model):
    """What a connector promises about its calls, so the caller knows what a retry may do."""

    idempotent: bool
    """A repeated call has no effect beyond the first (every read-only connector)."""
    retryable_codes: frozenset[str]
    """Error codes worth another try (``connector_unavailable``, ``timeout``)."""
    max_attempts: int = Field(default=2, ge=1)


READ_ONLY_RETRY = RetryContract(idempotent=True, retryable_codes=frozenset({"connector_unavailable", "timeout"}))


class MetricSeries(Model):
    """One time series: its labels and its ``(time, value)`` points in time order."""

    labels: dict[str, str] = Field(default_factory=dict)
    points: tuple[tuple[AwareDatetime, float], ...] = ()


class MetricResult(Model):
    """The answer to one instant or range query."""

    query: str
    start: AwareDatetime
    end: AwareDatetime
    step_seconds: float | None = None
    """None for an instant query."""
    series: tuple[MetricSeries, ...] = ()
    partial: bool = False
    """True when the system said the answer is incomplete or we cut it (series/size limits)."""
    warnings: tuple[str, ...] = ()


class LogLevel(StrEnum):
    DEBUG = "debug"
    INFO = "info"
    WARNING = "warning"
    ERROR = "error"
    CRITICAL = "critical"


LEVEL_ORDER: dict[LogLevel, int] = {level: rank for rank, level in enumerate(LogLevel)}


class LogQuery(Model):
    """Lines of one service in ``[start, end)``, optionally at or above a level, containing text."""

    service: str
    start: AwareDatetime
    end: AwareDatetime
    min_level: LogLevel | None = None
    text: str | None = None
    """Case-insensitive substring the message must contain."""
    limit: int = Field(default=500, ge=1, le=5000)


class LogLine(Model):
    at: AwareDatetime
    level: LogLevel
    message: str
    service: str | None = None
    fields: dict[str, str] = Field(default_factory=dict)


class LogResult(Model):
    """Matching lines, newest first; ``partial`` when more matched than ``limit``."""

    query: LogQuery
    lines: tuple[LogLine, ...] = ()
    total_matched: int = 0
    partial: bool = False


class RunbookQuery(Model):
    service: str | None = None
    alert: str | None = None
    text: str | None = None
    """Symptoms in free words (``latency timeout db pool``)."""
    version: str | None = None
    """The version the service runs now; hits say whether they apply to it."""
    limit: int = Field(default=5, ge=1, le=20)


class Runbook(Model):
    """A markdown runbook and its front matter."""

    runbook_id: str
    title: str
    path: str
    services: tuple[str, ...] = ()
    alerts: tuple[str, ...] = ()
    versions: str | None = None
    """Which versions of the service it was written for, e.g. ``>=3.0,<4.0``; None: any."""
    symptoms: tuple[str, ...] = ()
    causes: tuple[str, ...] = ()
    body: str = ""


class RunbookHit(Model):
    runbook: Runbook
    score: float
    applies: bool | None = None
    """Whether the runbook covers the queried version; None when no version was given."""


class RunbookResult(Model):
    query: RunbookQuery
    hits: tuple[RunbookHit, ...] = ()


class ChangeQuery(Model):
    tenant_id: str
    service: str
    environment: str
    start: AwareDatetime
    end: AwareDatetime
    limit: int = Field(default=50, ge=1, le=500)


class Change(Model):
    """A deploy or configuration change of a service (recorded from change events)."""

    service: str
    environment: str
    at: AwareDatetime
    version: str | None = None
    commit: str | None = None
    actor: str | None = None
    url: str | None = None
    description: str | None = None


class ChangeResult(Model):
    """Changes in the window, newest first."""

    query: ChangeQuery
    changes: tuple[Change, ...] = ()
    partial: bool = False
