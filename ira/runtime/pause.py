"""Pausing a loop without ignoring shutdown."""

from __future__ import annotations

import asyncio
import contextlib


async def pause(stop: asyncio.Event, seconds: float) -> None:
    """Wait ``seconds`` or until ``stop`` is set, whichever is first.

    A pacing pause between polls, never a way to wait for something to have happened.
    """
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(stop.wait(), timeout=seconds)
