"""Wait for a condition instead of sleeping: ``await eventually(check, timeout=...)``."""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

T = TypeVar("T")


async def eventually(
    check: Callable[[], T | Awaitable[T]], *, timeout: float = 10.0, interval: float = 0.05, message: str = ""
) -> T:
    """Call ``check`` until it returns something truthy (returned) or ``timeout`` seconds pass.

    ``check`` may be sync or async. An AssertionError inside it counts as "not yet", so a
    check can be written as assertions; on timeout the last one is re-raised for a clear diff.
    """
    deadline = time.monotonic() + timeout
    last_error: AssertionError | None = None
    while True:
        try:
            result = check()
            if inspect.isawaitable(result):
                result = await result
            if result:
                return result
            last_error = None
        except AssertionError as exc:
            last_error = exc
        if time.monotonic() >= deadline:
            if last_error is not None:
                raise last_error
            raise AssertionError(f"condition not met within {timeout}s {message}".rstrip())
        await asyncio.sleep(interval)
