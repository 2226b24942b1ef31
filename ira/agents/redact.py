"""Secrets never reach a model or an artifact: configured values and obvious tokens are masked.

Applied to every observation before it is stored or shown to a policy, so a log line that
echoes a password or an API key is evidence without the secret in it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

MASK = "[REDACTED]"
_PATTERNS = (
    re.compile(r"(?i)\b(bearer|basic)\s+[A-Za-z0-9._~+/=-]{8,}"),
    re.compile(r"(?i)\b(password|passwd|pwd|secret|token|api[_-]?key|access[_-]?key|authorization)"
               r"(\s*[=:]\s*)([^\s,;&\"']+)"),
    re.compile(r"\bAKIA[0-9A-Z]{16}\b"),
    re.compile(r"\bsk-[A-Za-z0-9_-]{16,}\b"),
    re.compile(r"\bxox[abprs]-[A-Za-z0-9-]{10,}\b"),
    re.compile(r"\bgh[pousr]_[A-Za-z0-9]{20,}\b"),
    re.compile(r"\beyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\b"),
    re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://[^:/\s]+:)([^@/\s]+)(@)"),
)


class Redactor:
    def __init__(self, secrets: Iterable[str] = ()) -> None:
        self._secrets = sorted({s for s in secrets if len(s) >= 4}, key=len, reverse=True)

    def text(self, value: str) -> str:
        for secret in self._secrets:
            value = value.replace(secret, MASK)
        for pattern in _PATTERNS:
            value = pattern.sub(_mask, value)
        return value

    def value(self, value: Any) -> Any:
        """Redact every string inside a JSON-like value (keys included)."""
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, dict):
            return {self.text(str(k)): self.value(v) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [self.value(v) for v in value]
        return value


def _mask(match: re.Match[str]) -> str:
    groups = match.groups()
    if len(groups) == 3:  # key=value and user:password@ forms keep their key and separator
        return f"{groups[0]}{groups[1]}{MASK}" if groups[2] != "@" else f"{groups[0]}{MASK}@"
    if len(groups) == 1 and groups[0]:
        return f"{groups[0]} {MASK}"
    return MASK
