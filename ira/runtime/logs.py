"""JSON logs: one object per line, carrying the ids that tie a line to a run and a trace.

Why context variables: a coroutine working on one step says once
``with log_context(tenant_id=..., run_id=..., step_id=...)`` and every line logged beneath it,
from any module, carries those ids; no logger adapters are threaded through call chains.
The trace and span ids come from the current OpenTelemetry span the same way.

Why a filter on the handler: secrets must never reach a log (DESIGN.md §9). The filter runs
the platform's one redactor (:mod:`ira.core.redact`: every configured secret value, and
secret-shaped text such as ``STRIPE_API_KEY=...`` or a bearer token) over the message, the
exception text and string extras before any formatter sees the record; ``SecretStr``
values already print as stars.
"""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from datetime import UTC, datetime
from types import MappingProxyType
from typing import Any, TextIO

from opentelemetry import trace

from ira.core.redact import Redactor

HANDLER_NAME = "ira-json"
_EMPTY: Mapping[str, str] = MappingProxyType({})
_context: ContextVar[Mapping[str, str]] = ContextVar("ira_log_context", default=_EMPTY)
_STANDARD_ATTRS = frozenset(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {
    "message",
    "asctime",
    "taskName",
}


@contextmanager
def log_context(
    *, tenant_id: str | None = None, run_id: str | None = None, step_id: str | None = None
) -> Iterator[None]:
    """Add ids to every log line written inside the block (nested blocks add to outer ones)."""
    given = {"tenant_id": tenant_id, "run_id": run_id, "step_id": step_id}
    token = _context.set({**_context.get(), **{k: v for k, v in given.items() if v is not None}})
    try:
        yield
    finally:
        _context.reset(token)


def current_log_context() -> Mapping[str, str]:
    """The ids the current task logs with (for handing on to a thread, or for a test)."""
    return dict(_context.get())


class SecretFilter(logging.Filter):
    """Masks secrets in a record (configured values and secret-shaped text), so no handler can write them."""

    def __init__(self, secrets: Iterable[str]) -> None:
        super().__init__()
        self._redactor = Redactor(secrets)

    def mask(self, text: str) -> str:
        return self._redactor.text(text)

    def filter(self, record: logging.LogRecord) -> bool:
        record.msg, record.args = self.mask(record.getMessage()), ()
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = self.mask(record.exc_text)
        for key, value in _extras(record).items():
            if isinstance(value, str):
                setattr(record, key, self.mask(value))
        return True


class JsonFormatter(logging.Formatter):
    """One JSON object per record: timestamp, level, logger, message, context ids, extras."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "timestamp": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        line.update(_context.get())
        line.update(_trace_ids())
        line.update(_extras(record))
        if record.exc_info or record.exc_text:
            line["exception"] = record.exc_text or self.formatException(record.exc_info)  # type: ignore[arg-type]
        return json.dumps(line, default=str, ensure_ascii=False)


class TextFormatter(logging.Formatter):
    """``15:04:05 WARNING ira.triage: message`` for a person at a terminal."""

    def format(self, record: logging.LogRecord) -> str:
        at = datetime.fromtimestamp(record.created, UTC).strftime("%H:%M:%S")
        role = getattr(record, "role", None)
        line = f"{at} {record.levelname:<7} {f'[{role}] ' if role else ''}{record.name}: {record.getMessage()}"
        if record.exc_info or record.exc_text:
            line += "\n" + (record.exc_text or self.formatException(record.exc_info))  # type: ignore[arg-type]
        return line


def is_text(log_format: str, stream: TextIO) -> bool:
    """``auto`` is text exactly when a person reads the stream (a terminal)."""
    return log_format == "text" or (log_format == "auto" and stream.isatty())


class RoleFilter(logging.Filter):
    """Names the role of an ``ira worker`` on each of its lines: a child of ``ira dev`` writes to
    the same stream as its parent and the other children."""

    def __init__(self, role: str) -> None:
        super().__init__()
        self._role = role

    def filter(self, record: logging.LogRecord) -> bool:
        record.role = self._role
        return True


def configure_logging(
    level: str | int = "INFO", *, secrets: Iterable[str] = (), stream: TextIO | None = None, log_format: str = "json",
    role: str | None = None,
) -> logging.Handler:
    """Send every log record to ``stream`` (stderr), masking ``secrets``: JSON lines, or for a
    person at a terminal short text lines of warnings and errors only (the quiet default of
    ``ira dev``; ``IRA_LOG_FORMAT=json`` shows everything at ``log_level``).

    Replaces a handler installed by an earlier call but leaves foreign handlers (pytest's
    capture, for one) alone. Returns the handler so a caller can remove it again.
    """
    root = logging.getLogger()
    for old in [h for h in root.handlers if h.get_name() == HANDLER_NAME]:
        root.removeHandler(old)
    stream = stream or sys.stderr
    text = is_text(log_format, stream)
    handler = logging.StreamHandler(stream)
    handler.set_name(HANDLER_NAME)
    handler.setFormatter(TextFormatter() if text else JsonFormatter())
    handler.addFilter(SecretFilter(secrets))
    if role is not None:
        handler.addFilter(RoleFilter(role))
    root.addHandler(handler)
    root.setLevel(max(logging.getLevelName(level) if isinstance(level, str) else level, logging.WARNING)
                  if text else level)
    return handler


def _trace_ids() -> dict[str, str]:
    context = trace.get_current_span().get_span_context()
    if not context.is_valid:
        return {}
    return {"trace_id": format(context.trace_id, "032x"), "span_id": format(context.span_id, "016x")}


def _extras(record: logging.LogRecord) -> dict[str, Any]:
    """Fields passed with ``extra={...}``: whatever the record has beyond the standard ones."""
    return {k: v for k, v in vars(record).items() if k not in _STANDARD_ATTRS and not k.startswith("_")}
