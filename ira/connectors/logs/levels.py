"""Level names as systems write them, mapped onto ``LogLevel``."""

from __future__ import annotations

from ira.core.signals import LEVEL_ORDER, LogLevel, LogQuery

_ALIASES = {
    "trace": LogLevel.DEBUG, "debug": LogLevel.DEBUG, "info": LogLevel.INFO, "information": LogLevel.INFO,
    "notice": LogLevel.INFO, "warn": LogLevel.WARNING, "warning": LogLevel.WARNING, "error": LogLevel.ERROR,
    "err": LogLevel.ERROR, "fatal": LogLevel.CRITICAL, "critical": LogLevel.CRITICAL, "crit": LogLevel.CRITICAL,
    "panic": LogLevel.CRITICAL, "emerg": LogLevel.CRITICAL, "alert": LogLevel.CRITICAL,
}


def parse_level(raw: object) -> LogLevel:
    """Unknown or missing levels count as info: never hidden by a ``warning`` filter by accident."""
    return _ALIASES.get(str(raw).strip().lower(), LogLevel.INFO)


def at_least(level: LogLevel, minimum: LogLevel | None) -> bool:
    return minimum is None or LEVEL_ORDER[level] >= LEVEL_ORDER[minimum]


def levels_from(query: LogQuery) -> list[str]:
    """The level names (and aliases) at or above the query's minimum, for a backend filter."""
    return sorted(name for name, level in _ALIASES.items() if at_least(level, query.min_level))
