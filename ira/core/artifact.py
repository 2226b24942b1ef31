"""Content-addressed evidence, reports and drafts: large bodies never live in state rows."""

from __future__ import annotations

import hashlib
from datetime import datetime

from ira.core.model import Model


def content_hash(body: bytes) -> str:
    """The artifact's identity: ``sha256:<hex>`` of its bytes."""
    return "sha256:" + hashlib.sha256(body).hexdigest()


class ArtifactRef(Model):
    """A pointer to a stored artifact; what state rows and events carry."""

    tenant_id: str
    ref: str
    media_type: str
    size: int
    created_at: datetime
