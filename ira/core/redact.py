"""Secrets never leave ira: one redactor masks them by value and by shape.

Why both: configured secrets (source tokens, API tokens, the Slack bot token and signing
secret, ticket API tokens, the database password) are known exactly and masked wherever
they appear; secrets ira was never told about (a ``STRIPE_API_KEY=sk_live_...`` echoed by a
log line, a bearer token in an alert annotation, a PEM key in a runbook) are recognised by
their shape: ``*_KEY=`` / ``*_TOKEN=`` / ``*_SECRET=`` / ``PASSWORD=`` assignments (env, JSON
and YAML style), ``Authorization:`` values, well-known token prefixes, JWTs, PEM private
keys and passwords in URLs.

Pure (regular expressions only), so every boundary where text leaves — observations and
artifacts, run events, logs, span attributes, model requests, ticket drafts, Slack messages —
calls the same :class:`Redactor` once. It is not on the per-alert ingest path: alerts are
redacted when a run takes them in, not when they arrive.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from functools import lru_cache
from typing import Any

MASK = "[REDACTED]"
MIN_SECRET_CHARS = 4
"""Shorter configured values are not masked: replacing every ``abc`` would garble text, not hide a secret."""

_NAMED = (r"[A-Z][A-Z0-9_]*_(?:KEY|TOKEN|SECRET|PASSWORD|PASSWD|PASS|PWD)"  # env style, upper case
          r"|(?i:[a-z0-9_.-]*(?:api[_-]?key|access[_-]?key|secret[_-]?key|private[_-]?key|client[_-]?secret"
          r"|token|secret|password|passwd|pwd))")
SECRET_NAME = re.compile(rf"^(?:{_NAMED}|(?i:(?:proxy-)?authorization|cookie|set-cookie))$")
"""A dict key whose string value is a secret (``{"api_key": "..."}``)."""
_VALUE = r"(?:\\\"[^\"\n]*?\\\"|\"[^\"\n]*\"|'[^'\n]*'|[^\s\"',;&}\\]+)"
_ASSIGNED = re.compile(
    rf"(?P<key>(?<![A-Za-z0-9])\\?[\"']?(?:{_NAMED})\\?[\"']?\s*[=:]\s*)(?P<value>{_VALUE})")
_AUTHORIZATION = re.compile(
    r"(?P<key>(?i:\b(?:proxy-)?authorization)[\"']?\s*[=:]\s*[\"']?(?i:(?:bearer|basic|token|digest)\s+)?)"
    r"(?P<value>[^\s\"',;]+)")
_SCHEME = re.compile(r"(?P<key>(?i:\b(?:bearer|basic))\s+)(?P<value>[A-Za-z0-9._~+/=-]{8,})")
_URL_PASSWORD = re.compile(r"(?P<key>(?i:\b[a-z][a-z0-9+.-]*://[^:/\s@]+:))(?P<value>[^@/\s]+)(?=@)")
_TOKENS = re.compile("|".join((
    r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----.*?(?:-----END [A-Z0-9 ]*PRIVATE KEY-----|\Z)",
    r"\b(?:sk|rk|pk)_(?:live|test)_[A-Za-z0-9]{8,}",
    r"\bsk-(?:proj-|ant-)?[A-Za-z0-9_-]{16,}",
    r"\bgithub_pat_[A-Za-z0-9_]{20,}",
    r"\bgh[pousr]_[A-Za-z0-9]{20,}",
    r"\bglpat-[A-Za-z0-9_-]{16,}",
    r"\bxox[abeprs]-[A-Za-z0-9-]{10,}",
    r"\bxapp-[A-Za-z0-9-]{10,}",
    r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b",
    r"\bAIza[0-9A-Za-z_-]{35}",
    r"\beyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}",
)), re.DOTALL)

# Cheap scans for what every match of the two costly patterns contains, so that text without it
# skips the pattern (the profile's finding: ~100 strings a run, 5 passes each, most of them JSON keys).
_TOKEN_HINT = re.compile(r"-----BEGIN |[sprk]k[_-]|github_pat_|gh[pousr]_|glpat-|xox|xapp-|AKIA|ASIA|AIza|eyJ")
"""A literal that starts every _TOKENS alternative."""
_ASSIGNED_HINT = re.compile(r"(?i:key|token|secret|passwd|password|pass|pwd)\\?[\"']?\s*[=:]")
"""A secret name's last word then ``=`` or ``:``: _ASSIGNED without the name's backtracking (~4x cheaper)."""
_LATER_HINT = re.compile(r"(?i:authorization|bearer|basic)|://")
"""A literal in every match of _AUTHORIZATION, _SCHEME or _URL_PASSWORD: text without one (ids,
timestamps, most values of run events, which miss the memo) skips those three passes. The passes
before them only put MASK where a value was, so they cannot make one of these literals appear."""
SHAPE_MIN_CHARS = 14
"""Shortest text any pattern matches without ``=`` or ``:`` (``basic`` + a space + 8 characters).

Tokens need 15 characters or more, the other patterns an ``=`` or ``:``: shorter text with neither
(most JSON keys and enum values of run events) cannot hold a secret shape and is not scanned."""
MEMO_MAX_CHARS = 256
"""Shorter text is masked through a bounded memo (4096 entries, about 1 MB at most): run events repeat
their keys, titles and references run after run. The memo holds text already in this process."""


class Redactor:
    """Masks configured secret values and secret-shaped text; ``Redactor()`` masks by shape only."""

    def __init__(self, secrets: Iterable[str] = ()) -> None:
        # Longest first: a secret that contains another is masked whole.
        self._secrets = sorted({s for s in secrets if len(s) >= MIN_SECRET_CHARS}, key=len, reverse=True)

    def text(self, value: str) -> str:
        for secret in self._secrets:
            if secret in value:
                value = value.replace(secret, MASK)
        return _mask_shapes_memo(value) if len(value) <= MEMO_MAX_CHARS else _mask_shapes(value)

    def value(self, value: Any) -> Any:
        """Every string inside a JSON-like value (keys included); a secret-named key's string value whole."""
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, dict):
            return {self.text(str(k)): MASK if _is_secret_entry(k, v) else self.value(v) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [self.value(v) for v in value]
        return value


def _is_secret_entry(key: object, value: object) -> bool:
    return isinstance(value, str) and bool(value) and value != MASK and bool(SECRET_NAME.match(str(key)))


def _mask_shapes(text: str) -> str:
    """The passes in order (each sees the previous one's output); a pass is skipped only where it cannot match."""
    if len(text) < SHAPE_MIN_CHARS and ":" not in text and "=" not in text:
        return text
    later = _LATER_HINT.search(text) is not None
    if _TOKEN_HINT.search(text):
        text = _TOKENS.sub(MASK, text)
    if later:
        text = _AUTHORIZATION.sub(_keep_key, text)
    if _ASSIGNED_HINT.search(text):
        text = _ASSIGNED.sub(_keep_key, text)
    if not later:
        return text
    text = _SCHEME.sub(_keep_key, text)
    return _URL_PASSWORD.sub(_keep_key, text)


_mask_shapes_memo = lru_cache(maxsize=4096)(_mask_shapes)


def _keep_key(match: re.Match[str]) -> str:
    """``KEY=value`` -> ``KEY=[REDACTED]``: the name stays readable, quotes stay balanced."""
    value = match.group("value")
    if value == MASK or value.strip("\"'") == MASK:
        return match.group(0)
    quote = value[:2] if value.startswith('\\"') else value[0] if value[:1] in "\"'" and len(value) > 1 else ""
    return f"{match.group('key')}{quote}{MASK}{quote}"
