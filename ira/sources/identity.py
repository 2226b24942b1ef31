"""Stable identities of alert states: what makes a re-sent alert recognisably the same.

Three names, three jobs:

* ``fingerprint`` — one alert across all its states (firing, resolved, firing again): the
  Kafka key and triage's grouping input. Alertmanager sends it; when a payload lacks it we
  compute it exactly the way Alertmanager does (FNV-1a 64 over the sorted label set), so a
  sender that omits it and one that sends it agree on the same alert.
* ``source_event_id`` — one *state* of that alert: sha256 of fingerprint + status + startsAt.
  The same state re-sent by an HA pair, a retry or ``repeat_interval`` has the same id; a new
  firing after a resolve has a new ``startsAt`` and therefore a new id.
* ``event_id`` — a UUID derived (uuid5) from ``(tenant_id, source_id, source_event_id)``.
  Deterministic on purpose: every re-send of one alert state carries the same ``message_id``
  on the bus, so triage's inbox (unique on it) drops what the edge window let through — after
  the window expired, after Redis lost its keys, or after a request that was half published
  before the broker failed and was then retried.
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Mapping
from datetime import datetime

_FNV_OFFSET = 14695981039346656037
_FNV_PRIME = 1099511628211
_MASK = (1 << 64) - 1
_SEPARATOR = 0xFF
EVENT_NAMESPACE = uuid.UUID("6f1d3c2a-5b0e-4e59-9c1f-2a7d8e4b9c10")
"""uuid5 namespace of ira's event ids (fixed forever: changing it re-identifies every alert)."""
_NAMESPACE_BYTES = EVENT_NAMESPACE.bytes


def label_fingerprint(labels: Mapping[str, str]) -> str:
    """Alertmanager's fingerprint of a label set (``model.LabelSet.Fingerprint``), 16 hex digits."""
    value = _FNV_OFFSET
    for name in sorted(labels):
        for part in (name, labels[name]):
            for byte in part.encode("utf-8"):
                value = ((value ^ byte) * _FNV_PRIME) & _MASK
            value = ((value ^ _SEPARATOR) * _FNV_PRIME) & _MASK
    return f"{value:016x}"


def state_id(fingerprint: str, status: str, starts_at: datetime) -> str:
    """The ``source_event_id`` of one alert state: sha256 hex of fingerprint, status, startsAt.

    ``starts_at`` must be in UTC already, so ``+08:00`` and ``Z`` spellings of one instant agree.
    """
    text = f"{fingerprint}\x1f{status}\x1f{starts_at.isoformat()}"
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def event_id(tenant_id: str, source_id: str, source_event_id: str) -> str:
    """The event's UUID, the same for every re-send of the same state (see the module doc).

    Exactly ``str(uuid.uuid5(EVENT_NAMESPACE, ...))``, computed without the UUID object: this
    runs once per alert on the ingest hot path, where ``uuid.uuid5`` costs several times more.
    """
    name = f"{tenant_id}\x1f{source_id}\x1f{source_event_id}".encode()
    digest = bytearray(hashlib.sha1(_NAMESPACE_BYTES + name, usedforsecurity=False).digest()[:16])
    digest[6] = (digest[6] & 0x0F) | 0x50  # version 5
    digest[8] = (digest[8] & 0x3F) | 0x80  # RFC 4122 variant
    text = digest.hex()
    return f"{text[:8]}-{text[8:12]}-{text[12:16]}-{text[16:20]}-{text[20:]}"


def content_id(*parts: str | None) -> str:
    """sha256 hex over ``parts``: the identity of an event that carries no id of its own."""
    text = "\x1f".join("" if part is None else part for part in parts)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()
