"""The notifier's reads and writes on ``deliveries``: it never touches a run."""

from __future__ import annotations

from typing import Any

from sqlalchemy import select, update
from sqlalchemy.ext.asyncio import AsyncConnection

from ira.core.chat import ChatRef
from ira.core.delivery import Notification, Receipt
from ira.core.errors import ConcurrentUpdateError, NotFoundError
from ira.core.model import Model
from ira.core.states import DeliveryState, check_delivery_transition
from ira.runtime.store.artifacts import get_artifact
from ira.runtime.store.schema import deliveries

_d = deliveries.c


async def load(conn: AsyncConnection, tenant_id: str, notification_id: str) -> tuple[dict[str, Any], Notification]:
    """The delivery row and the notification committed with it."""
    row = (await conn.execute(select(deliveries).where(
        _d.tenant_id == tenant_id, _d.notification_id == notification_id))).first()
    if row is None:
        raise NotFoundError(f"delivery {notification_id} not found")
    _, body = await get_artifact(conn, tenant_id, row.payload_ref)
    return dict(row._mapping), Notification.model_validate_json(body)


async def record_attempt(
    conn: AsyncConnection, row: dict[str, Any], receipt: Receipt, *, final: DeliveryState | None, at: Any,
) -> dict[str, Any]:
    """Append one receipt (and the final state, if this was the last word); CAS on attempts."""
    values: dict[str, Any] = {"attempts": row["attempts"] + 1, "updated_at": at,
                              "receipts": [*row["receipts"], receipt.model_dump(mode="json")]}
    if final is not None:
        values["state"] = check_delivery_transition(DeliveryState(row["state"]), final)
    result = await conn.execute(update(deliveries).where(
        _d.tenant_id == row["tenant_id"], _d.notification_id == row["notification_id"],
        _d.attempts == row["attempts"], _d.state == DeliveryState.PENDING).values(**values))
    if result.rowcount != 1:
        raise ConcurrentUpdateError(f"delivery {row['notification_id']} moved on meanwhile")
    return {**row, **values}


class Posted(Model):
    """A notification of a run that a chat channel accepted, and where its message lives."""

    notification: Notification
    ref: ChatRef


async def posted_for_run(conn: AsyncConnection, tenant_id: str, run_id: str, *, channel: str) -> list[Posted]:
    """The run's accepted ``channel`` posts, oldest first (approval messages, thread replies)."""
    rows = await conn.execute(select(deliveries).where(
        _d.tenant_id == tenant_id, _d.run_id == run_id, _d.channel == channel,
        _d.state == DeliveryState.ACCEPTED).order_by(_d.created_at, _d.notification_id))
    found = []
    for row in rows:
        accepted = [r["detail"] for r in row.receipts if r["state"] == DeliveryState.ACCEPTED]
        detail: dict[str, Any] = accepted[-1] if accepted else {}
        if "ts" not in detail:
            continue
        _, body = await get_artifact(conn, tenant_id, row.payload_ref)
        found.append(Posted(notification=Notification.model_validate_json(body), ref=ChatRef(
            channel=detail["channel_id"], ts=detail["ts"], thread_ts=detail.get("thread_ts"))))
    return found

