"""Notifications and their receipts, kept apart from the run's own result (C7)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import Field

from ira.core.model import Model
from ira.core.states import DeliveryState


class Receipt(Model):
    """What a channel answered to one send attempt."""

    at: datetime
    state: DeliveryState
    detail: dict[str, Any] = Field(default_factory=dict)


class Delivery(Model):
    """One notification to one channel."""

    notification_id: str
    tenant_id: str
    run_id: str | None
    channel: str
    state: DeliveryState
    attempts: int = 0
    receipts: tuple[Receipt, ...] = ()
    created_at: datetime
