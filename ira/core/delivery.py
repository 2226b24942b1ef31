"""Notifications and their receipts, kept apart from the run's own result (C7)."""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
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


class NotificationKind(StrEnum):
    """What a notification announces; channels render each kind their own way."""

    APPROVAL_REQUESTED = "approval_requested"
    APPROVAL_DECIDED = "approval_decided"
    APPROVAL_EXPIRED = "approval_expired"
    TICKET_CREATED = "ticket_created"
    RUN_COMPLETED = "run_completed"
    RUN_NEEDS_HUMAN = "run_needs_human"


DELIVERY_REQUESTED = "delivery.requested"
"""Envelope type on ``ira.deliveries.v1``: payload ``{"notification_id", "run_id", "kind"}``."""
DELIVERIES_INBOX = "notifier"
"""Where the notifier remembers the requests it attempted (with the first attempt's receipt):
a request is sent again until this inbox holds it, so a delivery never stays unattempted."""


class Notification(Model):
    """What a delivery sends, stored as an artifact when the delivery is committed (C6/ask).

    The notifier reads it back by ``notification_id``: it sends what was committed, never a
    recomputation, and receivers dedupe on ``notification_id``.
    """

    notification_id: str
    tenant_id: str
    run_id: str | None
    run_version: int
    """The run's ``state_version`` as of the commit that asked for this notification."""
    kind: str
    """A ``NotificationKind`` value."""
    data: dict[str, Any] = Field(default_factory=dict)
    created_at: datetime
