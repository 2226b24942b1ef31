"""A tool call as an investigator made it -> the recording a replay answers the same call from.

The agents store each call as the tool name, its arguments and the observation (the result's
data, or an error code and message). A recording is keyed the way the recorded connectors look
calls up (``query_key``, ``log_key``, ``runbook_key``, the service for changes), so a replay
asking the same question gets the same answer, or the same error.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import yaml

from ira.connectors.recorded import RUNBOOKS_PORT, RecordedError, Recording, log_key, query_key, runbook_key
from ira.core.signals import LogLevel, LogQuery, RunbookQuery

TIMELESS = datetime.fromisoformat("1970-01-01T00:00:00+00:00")
"""A runbook search asks about no time range; its recording still needs one."""
NOT_CALLED = frozenset({"denied", "invalid_arguments", "budget_exhausted"})
"""Error codes of calls the loop refused before any connector was asked: nothing to record."""


def tool_recording(tool: str, args: dict[str, Any], *, result: dict[str, Any] | None, error: RecordedError | None,
                   partial: bool = False, at: datetime | None = None) -> Recording | None:
    """The recording of one call, or None for a call no connector answered (refused, unknown tool)."""
    if error is not None and error.code in NOT_CALLED:
        return None
    keyed = _keyed(tool, args)
    if keyed is None:
        return None
    port, key, start, end = keyed
    return Recording(port=port, key=key, start=start, end=end, request=args, result=result, error=error,
                     partial=partial, at=at)


def _keyed(tool: str, args: dict[str, Any]) -> tuple[str, str, datetime, datetime] | None:
    try:
        if tool == "prometheus.query_range":
            return "metrics.query_range", query_key(args["query"]), _at(args["start"]), _at(args["end"])
        if tool == "prometheus.query":
            return "metrics.query", query_key(args["query"]), _at(args["at"]), _at(args["at"])
        if tool == "deployments.list":
            return "changes.list", str(args["service"]), _at(args["start"]), _at(args["end"])
        if tool == "logs.search":
            query = LogQuery(service=args["service"], start=args["start"], end=args["end"], text=args.get("text"),
                             min_level=LogLevel(args["min_level"]) if args.get("min_level") else None)
            return "logs.search", log_key(query), query.start, query.end
        if tool == "runbooks.search":
            books = RunbookQuery(service=args.get("service"), alert=args.get("alert"), text=args.get("text"),
                                 version=args.get("version"))
            return RUNBOOKS_PORT, runbook_key(books), TIMELESS, TIMELESS
    except (KeyError, ValueError, TypeError):
        return None  # arguments the tool itself would have refused
    return None


def _at(value: Any) -> datetime:
    return datetime.fromisoformat(str(value).replace("Z", "+00:00"))


def runbook_files(results: list[dict[str, Any]]) -> dict[str, str]:
    """The runbooks found by recorded searches, as files again (front matter + body), by file name."""
    files: dict[str, str] = {}
    for result in results:
        for hit in result.get("hits") or ():
            book = hit.get("runbook") or {}
            name = str(book.get("path") or book.get("runbook_id") or "runbook").rsplit("/", 1)[-1]
            meta = {k: book[k] for k in ("title", "services", "alerts", "versions", "symptoms", "causes")
                    if book.get(k) not in (None, [], ())}
            front = yaml.safe_dump({"id": book.get("runbook_id"), **meta}, sort_keys=False).strip()
            files.setdefault(name if name.endswith(".md") else name + ".md",
                             f"---\n{front}\n---\n{book.get('body', '')}\n")
    return files
