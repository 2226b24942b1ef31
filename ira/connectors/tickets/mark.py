"""How an issue in Jira or GitHub carries ira's idempotency key, so it can be found again.

Neither system has idempotency keys, so ira leaves two marks on every issue it files, both in
the create request itself (a create whose answer was lost leaves them in place):

* a **label** derived from the key (``ira-<tag>`` in Jira, ``ira:<tag>`` in GitHub): what a
  lookup searches for, because labels are what both systems index and filter on;
* the **mark** (tenant, full key, payload hash, when ira filed it): a Jira issue entity
  property, or a hidden HTML comment in the GitHub body. A label match alone proves nothing
  (a person can add a label); the mark confirms the issue is the one filed for this tenant's
  key, and its payload hash tells "the same ticket again" from "another payload" (a conflict).
"""

from __future__ import annotations

import hashlib
import re
from datetime import datetime

from ira.core.model import Model
from ira.core.ticket import Ticket

TAG_LENGTH = 24
"""96 bits of the key: unique enough for a label, short enough for GitHub's 50-character names."""
PROPERTY_KEY = "ira.idempotency"
_HEX = re.compile(rf"[0-9a-f]{{{TAG_LENGTH},}}")
_MARKER = re.compile(r"<!-- ira-idempotency-key: (?P<json>\{.*?\}) -->")


class IssueMark(Model):
    """What ira stores on an issue it files (nothing secret: key, hash, tenant, time)."""

    tenant_id: str
    idempotency_key: str
    payload_hash: str
    filed_at: datetime

    def is_for(self, tenant_id: str, idempotency_key: str) -> bool:
        return (self.tenant_id, self.idempotency_key) == (tenant_id, idempotency_key)

    def ticket(self, *, system: str, key: str, title: str, url: str | None) -> Ticket:
        return Ticket(tenant_id=self.tenant_id, key=key, idempotency_key=self.idempotency_key,
                      payload_hash=self.payload_hash, title=title, url=url, system=system,
                      created_at=self.filed_at)


def key_tag(idempotency_key: str) -> str:
    """A label-safe tag of the key: its hex digest if it is ``sha256:<hex>`` (ira's keys are),
    else the sha256 of the key."""
    kind, _, digest = idempotency_key.partition(":")
    if kind != "sha256" or not _HEX.fullmatch(digest):
        digest = hashlib.sha256(idempotency_key.encode()).hexdigest()
    return digest[:TAG_LENGTH]


def render_marker(mark: IssueMark) -> str:
    """The hidden Markdown line that carries the mark in a GitHub issue body."""
    return f"<!-- ira-idempotency-key: {mark.model_dump_json()} -->"


def parse_marker(body: str | None) -> IssueMark | None:
    """The mark of a GitHub issue body, or None (no marker, or one that does not parse)."""
    found = _MARKER.search(body or "")
    if found is None:
        return None
    try:
        return IssueMark.model_validate_json(found["json"])
    except ValueError:
        return None
