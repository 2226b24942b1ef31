"""The replay loop rests while no replay is active and wakes for one this process stores."""

from __future__ import annotations

import asyncio
import time
from dataclasses import replace
from datetime import timedelta
from types import SimpleNamespace
from typing import Any

import pytest

from ira.replay import main
from ira.replay.main import ReplayRole
from tests.eventually import eventually


class Ticks:
    """Stands in for ``ReplayLoop``: counts ticks, active while ``active`` says so."""

    def __init__(self) -> None:
        self.count, self.active = 0, False

    def __call__(self, **_: Any) -> Ticks:
        return self

    async def tick(self) -> bool:
        self.count += 1
        return self.active


async def test_an_idle_loop_rests_and_a_stored_replay_wakes_it(monkeypatch: pytest.MonkeyPatch) -> None:
    ticks = Ticks()
    monkeypatch.setattr(main, "ReplayLoop", ticks)
    role = ReplayRole()
    role.config = replace(role.config, interval=timedelta(milliseconds=20), idle_interval=timedelta(seconds=30))
    platform = SimpleNamespace(db=None, clock=None, settings=SimpleNamespace(http=SimpleNamespace(
        host="127.0.0.1", port=9)))
    stop = asyncio.Event()
    running = asyncio.create_task(role.run(platform, stop))  # type: ignore[arg-type]
    try:
        await eventually(lambda: ticks.count == 1)
        rested = time.monotonic()
        await eventually(lambda: time.monotonic() - rested >= 0.3, timeout=5)
        assert ticks.count == 1  # no replay active: no tick every 20 ms
        ticks.active = True
        role._requested()  # what POST /v1/replays calls once the replay is stored
        await eventually(lambda: ticks.count >= 5, timeout=5)  # active: every interval
        ticks.active = False
        settled = ticks.count
        await eventually(lambda: time.monotonic() - rested >= 0.9, timeout=5)
        assert ticks.count <= settled + 1  # at rest again after the tick that found none
    finally:
        stop.set()
        await asyncio.wait_for(running, timeout=5)  # a stop ends the rest at once
