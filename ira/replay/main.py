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
    """The loop comes round every ``config.interval`` while a replay is active, and rests for
    ``config.idle_interval`` while none is, woken by a replay this process's API stores: an idle
    loop's reader every 200 ms was one of the larger costs of an idle ``ira dev``."""

    name = "replay"
    config = ReplayConfig()

    def __init__(self) -> None:
        self._wake: asyncio.Event | None = None

    def routers(self, platform: Platform) -> Sequence[APIRouter]:
        return (build_replay_api(platform, self.config, requested=self._requested),)

    def _requested(self) -> None:
        if self._wake is not None:
            self._wake.set()

    async def run(self, platform: Platform, stop: asyncio.Event) -> None:
        wake = self._wake = asyncio.Event()
        stopping = asyncio.create_task(_set_on(stop, wake))
        try:
            async with httpx.AsyncClient(base_url=gateway_url(platform), timeout=10) as client:
                loop = ReplayLoop(db=platform.db, clock=platform.clock, settings=platform.settings, client=client,
                                  config=self.config)
                while not stop.is_set():
                    wake.clear()  # before the tick: a replay stored during it wakes the rest after it
                    try:
                        active = await loop.tick()
                    except Exception:  # a failed tick is retried on the next one; the rows hold the progress
                        log.exception("replay: tick failed")
                        active = True
                    rest = self.config.interval if active else self.config.idle_interval
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(wake.wait(), rest.total_seconds())
        finally:
            self._wake = None
            stopping.cancel()


async def _set_on(stop: asyncio.Event, wake: asyncio.Event) -> None:
    await stop.wait()
    wake.set()


role = ReplayRole()
