"""Loki ``/loki/api/v1/query_range`` as a ``LogSource``.

The LogQL is built here from the typed query, never taken from a caller: a stream selector on
the service label, a case-insensitive line filter for the text, and a level filter on the
JSON ``level`` field. Values are quoted, so a service name or text cannot change the query.
"""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime

import httpx

from ira.connectors.http import get_json_limited
from ira.connectors.logs.jsonl import parse_line
from ira.connectors.logs.levels import at_least, levels_from, parse_level
from ira.core.errors import ConnectorRejectedError, ConnectorUnavailableError
from ira.core.signals import READ_ONLY_RETRY, LogLine, LogQuery, LogResult, RetryContract

SYSTEM = "loki"


def logql(query: LogQuery, *, service_label: str = "service") -> str:
    text = f' |~ {json.dumps("(?i)" + re.escape(query.text))}' if query.text else ""
    level = ""
    if query.min_level is not None:
        level = f' | json | level=~{json.dumps("(?i)" + "|".join(levels_from(query)))}'
    return f"{{{service_label}={json.dumps(query.service)}}}{text}{level}"


class LokiLogSource:
    retry: RetryContract = READ_ONLY_RETRY

    def __init__(self, client: httpx.AsyncClient, *, service_label: str = "service",
                 max_bytes: int = 10 * 1024 * 1024) -> None:
        self._client, self._label, self._max_bytes = client, service_label, max_bytes

    async def search(self, query: LogQuery) -> LogResult:
        params = {"query": logql(query, service_label=self._label), "start": str(int(query.start.timestamp() * 1e9)),
                  "end": str(int(query.end.timestamp() * 1e9)), "limit": str(query.limit + 1),
                  "direction": "backward"}
        status, body = await get_json_limited(self._client, SYSTEM, "/loki/api/v1/query_range", params=params,
                                              max_bytes=self._max_bytes)
        try:
            payload = json.loads(body)
        except ValueError as exc:
            raise ConnectorUnavailableError(SYSTEM, f"HTTP {status}: answer is not JSON") from exc
        if status >= 400 or payload.get("status") != "success":
            raise ConnectorRejectedError(SYSTEM, f"HTTP {status}: {body[:200]!r}")
        lines = sorted(_lines(payload, query), key=lambda line: line.at, reverse=True)
        return LogResult(query=query, lines=tuple(lines[: query.limit]), total_matched=len(lines),
                         partial=len(lines) > query.limit)


def _lines(payload: dict, query: LogQuery) -> list[LogLine]:  # type: ignore[type-arg]
    found = []
    for stream in (payload.get("data") or {}).get("result") or []:
        labels = stream.get("stream") or {}
        for ns, raw in stream.get("values") or []:
            line = _line(labels, raw, ns=int(ns), query=query)
            if line is not None and at_least(line.level, query.min_level):
                found.append(line)
    return found


def _line(labels: dict[str, str], raw: str, *, ns: int, query: LogQuery) -> LogLine | None:
    at = datetime.fromtimestamp(ns / 1e9, UTC)
    parsed = parse_line(raw, default_at=at)
    if parsed is not None:
        return parsed.model_copy(update={"at": at, "service": parsed.service or query.service})
    return LogLine(at=at, level=parse_level(labels.get("level")), message=raw, service=query.service,
                   fields={k: v for k, v in labels.items() if k != "level"})
