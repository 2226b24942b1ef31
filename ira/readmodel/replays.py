"""Replays as the dashboard lists them: progress, the verdict and the comparison side by side."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncConnection

from ira.core.errors import NotFoundError
from ira.core.model import Model
from ira.core.replay import Row
from ira.replay.tables import replays


class ReplaySummary(Model):
    replay_id: str
    bundle_id: str
    state: str
    observations_from: str  # "recorded" (the bundle's observations) or "live" (the configured connectors)
    events_sent: int
    events_total: int
    run_id: str | None
    error: str | None
    verdict: str | None
    passed: bool | None
    rows: tuple[Row, ...]
    draft_diff: tuple[str, ...]
    unmet: tuple[str, ...]
    created_at: datetime


def summary_of(row: Any) -> ReplaySummary:
    report: dict[str, Any] = row.report or {}
    comparison = report.get("comparison") or {}
    return ReplaySummary(
        replay_id=row.replay_id, bundle_id=row.bundle_id, state=row.state,
        observations_from=(row.original or {}).get("observations_from") or "recorded", events_sent=row.events_sent,
        events_total=row.events_total, run_id=row.run_id, error=row.error, verdict=report.get("verdict"),
        passed=report.get("passed"), rows=tuple(Row.model_validate(r) for r in comparison.get("rows", ())),
        draft_diff=tuple(comparison.get("draft_diff", ())), unmet=tuple(report.get("unmet", ())),
        created_at=row.created_at)


async def list_replays(conn: AsyncConnection, tenant_id: str, *, limit: int = 50) -> tuple[ReplaySummary, ...]:
    """The tenant's replays, newest first."""
    rows = await conn.execute(select(replays).where(replays.c.tenant_id == tenant_id)
                              .order_by(replays.c.created_at.desc(), replays.c.replay_id.desc()).limit(limit))
    return tuple(summary_of(r) for r in rows)


async def replay_detail(conn: AsyncConnection, tenant_id: str, replay_id: str) -> ReplaySummary:
    """One of the tenant's replays; another tenant's is not found, as a missing one."""
    row = (await conn.execute(select(replays).where(replays.c.tenant_id == tenant_id,
                                                    replays.c.replay_id == replay_id))).first()
    if row is None:
        raise NotFoundError(f"replay {replay_id} not found")
    return summary_of(row)
