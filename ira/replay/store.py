"""The replays table: create a replay, record its progress and its report, read it back."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import bindparam, func, insert, select, update
from sqlalchemy.ext.asyncio import AsyncConnection

from ira.core.errors import NotFoundError
from ira.replay.tables import replays

SENDING, RUNNING, FINISHED, FAILED = "sending", "running", "finished", "failed"
ACTIVE = (SENDING, RUNNING)


async def create(conn: AsyncConnection, *, tenant_id: str, replay_id: str, bundle_id: str, recording_ref: str,
                 original: dict[str, Any], events_total: int, at: datetime) -> None:
    await conn.execute(insert(replays).values(
        tenant_id=tenant_id, replay_id=replay_id, bundle_id=bundle_id, state=SENDING, recording_ref=recording_ref,
        events_total=events_total, events_sent=0, original=original, created_at=at, updated_at=at))


async def active_count(conn: AsyncConnection, tenant_id: str | None = None) -> int:
    query = select(func.count()).select_from(replays).where(replays.c.state.in_(ACTIVE))
    if tenant_id is not None:
        query = query.where(replays.c.tenant_id == tenant_id)
    return int((await conn.execute(query)).scalar_one())


async def active(conn: AsyncConnection, *, limit: int) -> list[Any]:
    """Replays still sending or waiting on their run, oldest first (every tenant: the loop's work)."""
    return list(await conn.execute(_ACTIVE, {"limit": limit}))


_ACTIVE = select(replays).where(replays.c.state.in_(ACTIVE)).order_by(replays.c.created_at).limit(bindparam("limit"))
"""Built once: the replay loop reads it every tick (200 ms), almost always finding nothing; built
per call, its construction and cache key were most of an idle tick's CPU."""


async def progress(conn: AsyncConnection, row: Any, *, at: datetime, **values: Any) -> None:
    await conn.execute(update(replays).where(replays.c.tenant_id == row.tenant_id,
                                             replays.c.replay_id == row.replay_id).values(updated_at=at, **values))


async def get(conn: AsyncConnection, tenant_id: str, replay_id: str) -> Any:
    row = (await conn.execute(select(replays).where(replays.c.tenant_id == tenant_id,
                                                    replays.c.replay_id == replay_id))).first()
    if row is None:
        raise NotFoundError(f"replay {replay_id} not found")
    return row


async def listed(conn: AsyncConnection, tenant_id: str, *, limit: int) -> list[Any]:
    return list(await conn.execute(select(replays).where(replays.c.tenant_id == tenant_id)
                                   .order_by(replays.c.created_at.desc(), replays.c.replay_id.desc()).limit(limit)))
