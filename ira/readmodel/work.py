"""What needs a person: open approvals, human reviews, manual repairs, blocked runs."""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncConnection

from ira.core.states import WorkItemState
from ira.readmodel.detail import WorkItemView
from ira.readmodel.rows import view_of
from ira.runtime.store.schema import work_items


async def open_work_items(conn: AsyncConnection, tenant_id: str, *, limit: int = 100) -> list[WorkItemView]:
    """Newest first."""
    rows = await conn.execute(select(work_items).where(
        work_items.c.tenant_id == tenant_id, work_items.c.state == WorkItemState.OPEN)
        .order_by(work_items.c.created_at.desc()).limit(limit))
    return [view_of(WorkItemView, r) for r in rows]
