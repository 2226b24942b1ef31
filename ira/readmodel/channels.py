"""Channels that refuse ira for good (a revoked token, a bot removed from its channel).

A permanent refusal is a configuration problem no retry fixes, so a person must see it: the
dashboard's health page lists, per channel, the refusals newer than the channel's last
accepted delivery (an accepted one means it was fixed since).
"""

from __future__ import annotations

from datetime import datetime, timedelta

from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncConnection

from ira.core.model import Model
from ira.core.states import DeliveryState
from ira.runtime.store.schema import deliveries

_d = deliveries.c
LOOKBACK = timedelta(days=1)
LIMIT = 20


class ChannelProblem(Model):
    """One delivery a channel refused permanently."""

    channel: str
    error: str
    notification_id: str
    run_id: str | None
    at: datetime


async def channel_problems(conn: AsyncConnection, tenant_id: str, *, now: datetime) -> list[ChannelProblem]:
    """The tenant's permanent refusals of the last day not followed by an accepted delivery."""
    since = now - LOOKBACK
    fixed = dict((await conn.execute(select(_d.channel, func.max(_d.updated_at)).where(
        _d.tenant_id == tenant_id, _d.state == DeliveryState.ACCEPTED, _d.updated_at >= since)
        .group_by(_d.channel))).all())
    rows = await conn.execute(select(deliveries).where(
        _d.tenant_id == tenant_id, _d.state == DeliveryState.FAILED, _d.updated_at >= since)
        .order_by(_d.updated_at.desc()).limit(LIMIT))
    found = []
    for row in rows:
        last = row.receipts[-1]["detail"] if row.receipts else {}
        if last.get("permanent") and (row.channel not in fixed or fixed[row.channel] < row.updated_at):
            found.append(ChannelProblem(channel=row.channel, error=str(last.get("error")), run_id=row.run_id,
                                        notification_id=row.notification_id, at=row.updated_at))
    return found

