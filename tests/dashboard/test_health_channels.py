"""The health page names a channel that refuses ira for good, until a delivery gets through."""

from __future__ import annotations

from datetime import timedelta

import httpx

from ira.core.ids import new_id
from ira.dashboard.main import role
from ira.runtime.http import create_app
from ira.runtime.platform import Platform
from ira.runtime.store.schema import deliveries


async def delivered(platform: Platform, *, state: str, detail: dict[str, object], ago: timedelta) -> None:
    at = platform.clock.now() - ago
    async with platform.db.transaction() as conn:
        await conn.execute(deliveries.insert().values(
            tenant_id="demo", notification_id=new_id("ntf"), run_id="run_health", channel="slack", state=state,
            attempts=1, payload_ref=None, created_at=at, updated_at=at,
            receipts=[{"at": at.isoformat(), "state": state, "detail": {"channel": "slack", **detail}}]))


async def health_page(platform: Platform) -> str:
    app = create_app(metrics=platform.metrics, routers=list(role.routers(platform)))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://ira") as client:
        page = await client.get("/health", headers={"authorization": "Bearer dev-admin-token"})
    assert page.status_code == 200
    return page.text


async def test_a_permanent_refusal_shows_on_the_health_page_until_a_later_delivery_is_accepted(
    platform: Platform,
) -> None:
    before = await health_page(platform)
    await delivered(platform, state="failed", detail={"error": "ratelimited", "retry_after": 1}, ago=timedelta(0))
    await delivered(platform, state="failed", detail={"error": "not_in_channel", "permanent": True},
                    ago=timedelta(minutes=2))
    refused = await health_page(platform)
    await delivered(platform, state="accepted", detail={"ts": "1.2", "channel_id": "C1"}, ago=timedelta(minutes=1))
    fixed = await health_page(platform)
    assert "not_in_channel" not in before and "No channel refused" in before
    assert "not_in_channel" in refused and "ratelimited" not in refused and "run_health" in refused
    assert "not_in_channel" not in fixed
