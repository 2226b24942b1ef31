"""The ``replay`` role: the replay API and the loop that sends, watches and reports (composition root)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Sequence

import httpx
from fastapi import APIRouter

from ira.replay.api import build_replay_api
from ira.replay.watch import ReplayConfig, ReplayLoop
from ira.runtime.platform import Platform

log = logging.getLogger(__name__)


def gateway_url(platform: Platform) -> str:
    """This ira's own gateway (the replay's events take the path real sources take)."""
    host = platform.settings.http.host
    return f"http://{'127.0.0.1' if host in ('0.0.0.0', '::', '') else host}:{platform.settings.http.port}"


class ReplayRole:
    name = "replay"
    config = ReplayConfig()

    def routers(self, platform: Platform) -> Sequence[APIRouter]:
        return (build_replay_api(platform, self.config),)

    async def run(self, platform: Platform, stop: asyncio.Event) -> None:
        async with httpx.AsyncClient(base_url=gateway_url(platform), timeout=10) as client:
            loop = ReplayLoop(db=platform.db, clock=platform.clock, settings=platform.settings, client=client,
                              config=self.config)
            while not stop.is_set():
                try:
                    await loop.tick()
                except Exception:  # a failed tick is retried on the next one; the rows hold the progress
                    log.exception("replay: tick failed")
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), self.config.interval.total_seconds())


role = ReplayRole()
