"""Tickets: what the coordinator asks a ticket system to create, and what it gets back.

The request is the approved draft's content; its canonical hash is what an Approval binds
and what a ticket system compares when the same idempotency key arrives twice.
"""

from __future__ import annotations

import hashlib
import json
from datetime import datetime

from pydantic import Field

from ira.core.model import Model


class TicketRequest(Model):
    """The fields of one ticket, exactly as approved."""

    tenant_id: str
    title: str
    body: str
    severity: str
    service: str | None = None
    incident_id: str
    labels: dict[str, str] = Field(default_factory=dict)

    def payload_hash(self) -> str:
        """``sha256:<hex>`` of the canonical JSON (sorted keys, no whitespace)."""
        canonical = json.dumps(self.model_dump(mode="json"), sort_keys=True, separators=(",", ":"))
        return "sha256:" + hashlib.sha256(canonical.encode()).hexdigest()


class Ticket(Model):
    """A ticket as the ticket system reports it: the receipt of a create, or a lookup."""

    tenant_id: str
    key: str
    """The system's own id, e.g. ``INC-4821``."""
    idempotency_key: str
    payload_hash: str
    title: str
    url: str | None = None
    system: str
    created_at: datetime
