"""JSON-lines log files as a ``LogSource``: the embedded default (the demo service writes them).

Files are found by a glob and read in a worker thread. Each line is a JSON object; the time,
level, message and service fields are recognised under their usual names (``ts``/``time``/
``timestamp``/``@timestamp``, ``level``/``severity``, ``message``/``msg``, ``service``/
``service.name``). Lines that are not JSON, or have no readable time, are skipped: one bad
line never hides the rest.
"""

from __future__ import annotations

import asyncio
import glob
import json
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

from ira.connectors.logs.levels import at_least, parse_level
from ira.core.signals import READ_ONLY_RETRY, LogLine, LogQuery, LogResult, RetryContract

TIME_KEYS = ("ts", "time", "timestamp", "@timestamp")
LEVEL_KEYS = ("level", "severity", "lvl")
MESSAGE_KEYS = ("message", "msg", "event")
SERVICE_KEYS = ("service", "service.name", "app")
_KNOWN = {*TIME_KEYS, *LEVEL_KEYS, *MESSAGE_KEYS, *SERVICE_KEYS}


class JsonlLogSource:
    retry: RetryContract = READ_ONLY_RETRY

    def __init__(self, pattern: str) -> None:
        self._pattern = pattern

    async def search(self, query: LogQuery) -> LogResult:
        return await asyncio.to_thread(self._search, query)

    def _search(self, query: LogQuery) -> LogResult:
        matched = [line for line in self._lines() if _matches(line, query)]
        matched.sort(key=lambda line: line.at, reverse=True)
        return LogResult(query=query, lines=tuple(matched[: query.limit]), total_matched=len(matched),
                         partial=len(matched) > query.limit)

    def _lines(self) -> Iterator[LogLine]:
        for path in sorted(glob.glob(self._pattern)):
            try:
                with open(path, encoding="utf-8", errors="replace") as handle:
                    for raw in handle:
                        line = parse_line(raw)
                        if line is not None:
                            yield line
            except OSError:
                continue  # rotated away between glob and open


def _matches(line: LogLine, query: LogQuery) -> bool:
    return (query.start <= line.at < query.end and line.service == query.service
            and at_least(line.level, query.min_level)
            and (not query.text or query.text.lower() in line.message.lower()))


def parse_line(raw: str, *, default_at: datetime | None = None) -> LogLine | None:
    """One JSON log line; ``default_at`` stands in for a missing time (Loki keeps it outside)."""
    try:
        record = json.loads(raw)
    except ValueError:
        return None
    if not isinstance(record, dict):
        return None
    at = _time(_first(record, TIME_KEYS)) or default_at
    if at is None:
        return None
    fields = {k: _text(v) for k, v in record.items() if k not in _KNOWN}
    service = _first(record, SERVICE_KEYS)
    return LogLine(at=at, level=parse_level(_first(record, LEVEL_KEYS)), message=_text(_first(record, MESSAGE_KEYS)),
                   service=None if service is None else str(service), fields=fields)


def _first(record: dict[str, Any], keys: tuple[str, ...]) -> Any:
    return next((record[k] for k in keys if k in record), None)


def _text(value: Any) -> str:
    if value is None:
        return ""
    return value if isinstance(value, str) else json.dumps(value, sort_keys=True)


def _time(value: Any) -> datetime | None:
    try:
        if isinstance(value, int | float):
            return datetime.fromtimestamp(value, UTC)
        if isinstance(value, str):
            at = datetime.fromisoformat(value.replace("Z", "+00:00"))
            return at if at.tzinfo else at.replace(tzinfo=UTC)
    except (ValueError, OverflowError, OSError):
        return None
    return None
