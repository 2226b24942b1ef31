"""What the store can hold, said once: the edge's schemas and the tables read the same numbers.
A value the webhook answered 202 for must never be refused by a column later (it would be
accepted data lost, dead-lettered inside triage). ``tests/sources/test_store_limits.py`` posts
every boundary through the real pipeline to SQLite and PostgreSQL and checks the columns.

Over a limit, by who owns the schema:

* payloads ira does not own (Alertmanager, Grafana): the alert is *kept*. A name, service or
  environment longer than its column is cut to fit with a marker (:func:`fit`: ``…#`` and 8
  hex digits of the full value's SHA-256, so two long values never become one), the labels
  keep the full value (grouping reads the labels), and a NUL is replaced by U+FFFD
  (:func:`without_nul`). Alertmanager does not retry a 4xx and would re-send the same group
  with the same alert, so refusing it would lose the good alerts of its group for good.
* schemas ira defines (generic alerts, change events): refused with 422 naming the field;
  the sender is ours to fix.
* counts and sizes that bound the work of one request (labels per alert, label name and
  value length, alerts per request) are refused for every source: 422, or 413 for alerts
  per request, naming the field. No real alert comes near them.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping

ALERT_NAME_MAX = 200
"""An alert's name (``alertname``, a Grafana rule title, a generic alert's title)."""
SERVICE_MAX = 200
ENVIRONMENT_MAX = 64
VERSION_MAX = 200
COMMIT_MAX = 100
ACTOR_MAX = 200
TITLE_MAX = 300
"""An incident's title (derived from the alert name and service; cut to fit, never refused)."""
FINGERPRINT_MAX = 200
"""A sender's own alert id (Alertmanager's and Grafana's fingerprint, a generic alert's id)."""

GROUP_KEY_MAX = 500
"""An incident's group key (``triage.tables``); a longer key keeps a readable head plus a digest."""
LABELS_MAX = 1000
"""Labels (and, separately, annotations) of one alert."""
LABEL_NAME_MAX = 1024
TEXT_MAX = 64 * 1024
"""Longest single string kept from a payload (a label or annotation value, a URL); the 1 MiB
body limit bounds the rest."""
ALERTS_PER_REQUEST_MAX = 100_000
"""Highest ``max_alerts_per_request`` a configuration may set (the default is 1,000)."""

NUL = "\x00"
"""PostgreSQL cannot store it in text or JSON; SQLite can. Never stored, on any backend."""
NUL_MARK = "\ufffd"
"""What a NUL becomes in a payload ira does not own (the Unicode replacement character)."""
_CUT_MARK = "…#"
_DIGEST_CHARS = 8


def too_long(value: str | None, limit: int) -> bool:
    return value is not None and len(value) > limit


def has_nul(values: Iterable[str | None]) -> bool:
    return any(v is not None and NUL in v for v in values)


def fit(value: str, limit: int) -> str:
    """``value`` if it fits ``limit`` characters, else its head marked as cut, with a digest of
    the whole value: distinct long values stay distinct."""
    if len(value) <= limit:
        return value
    digest = hashlib.sha256(value.encode("utf-8", "surrogatepass")).hexdigest()[:_DIGEST_CHARS]
    return value[:limit - len(_CUT_MARK) - _DIGEST_CHARS] + _CUT_MARK + digest


def fit_optional(value: str | None, limit: int) -> str | None:
    return None if value is None else fit(value, limit)


def without_nul(value: str) -> str:
    return value.replace(NUL, NUL_MARK) if NUL in value else value


def mapping_without_nul(values: Mapping[str, str]) -> dict[str, str]:
    """Keys and values with every NUL replaced (the same mapping object's content if none)."""
    if NUL not in "".join(values) and NUL not in "".join(values.values()):  # the usual case, in C
        return dict(values)
    return {without_nul(k): without_nul(v) for k, v in values.items()}
