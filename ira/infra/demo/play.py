"""Play a scenario bundle into a running ira, as its real sources would have sent it.

Each recorded source event is re-timed so the incident happens *now* (every timestamp in
the payload moves by the same amount, which also makes it a new alert identity), then
POSTed to the gateway with that source's own credentials, in order, with the recorded gaps
compressed by ``speedup``. Used by ``ira demo`` and by ``ira dev --demo`` (``make run``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import UTC, datetime

import httpx

from ira.core.timeshift import retime
from ira.infra.demo.bundle import Bundle, SourceEvent
from ira.runtime.settings import Settings


def source_headers(settings: Settings, event: SourceEvent) -> dict[str, str]:
    source = settings.source(event.source_id)
    if source is None or source.bearer_token is None:
        raise ValueError(f"the bundle posts to source {event.source_id!r}, which is not configured with a token")
    return {"authorization": f"Bearer {source.bearer_token.get_secret_value()}"}


async def play_bundle(
    bundle: Bundle, *, base_url: str, settings: Settings, speedup: float = 30.0, say: Callable[[str], None] = print,
) -> list[str]:
    """POST every source event; returns the event ids ira accepted."""
    shift = datetime.now(UTC) - bundle.info.window_end
    accepted: list[str] = []
    elapsed = 0.0
    async with httpx.AsyncClient(base_url=base_url, timeout=10) as client:
        for event in sorted(bundle.events, key=lambda e: e.offset_seconds):
            await asyncio.sleep(max(0.0, (event.offset_seconds - elapsed) / speedup))  # pacing, not sync
            elapsed = event.offset_seconds
            response = await client.post(event.path, json=retime(event.payload, shift),
                                         headers=source_headers(settings, event))
            response.raise_for_status()
            body = response.json()
            accepted += body.get("event_ids", [])
            say(f"demo      {event.kind} event → {event.path}: {body.get('accepted', 0)} accepted")
    return accepted
