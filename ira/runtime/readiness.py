"""Readiness: is every dependency this process needs answering right now?

A check is an async callable that returns when its dependency is fine and raises (anything)
when it is not; the exception's text is what ``/readyz`` and ``ira doctor`` show. Checks are
plain callables so tests pass real ones against real services, and each role's process
checks only what it uses.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping
from datetime import timedelta
from typing import TYPE_CHECKING

from ira.runtime.bus.admin import missing_topics
from ira.runtime.store.migrate import pending

if TYPE_CHECKING:
    from redis.asyncio import Redis

    from ira.runtime.duty import DutyRoster
    from ira.runtime.platform import Platform
    from ira.runtime.store.database import Database

ReadinessCheck = Callable[[], Awaitable[None]]
"""Returns when the dependency is ready; raises with a reason when it is not."""

DEFAULT_CHECK_TIMEOUT = timedelta(seconds=2)


class NotReadyError(Exception):
    """A dependency answered, but not the way a ready process needs (migrations pending...)."""


def database_check(db: Database) -> ReadinessCheck:
    """The database answers and its schema is current (a stale schema is not ready)."""

    async def check() -> None:
        await db.ping()
        missing = await pending(db)
        if missing:
            raise NotReadyError(f"{len(missing)} migration(s) pending: run `ira db upgrade`")

    return check


def redis_check(redis: Redis) -> ReadinessCheck:
    """Redis answers PING."""

    async def check() -> None:
        await redis.ping()

    return check


def kafka_check(bootstrap: str, environment: str) -> ReadinessCheck:
    """The broker answers and has our topics (the embedded broker forgets them on restart)."""

    async def check() -> None:
        missing = await missing_topics(bootstrap, environment)
        if missing:
            raise NotReadyError(f"topics missing: {', '.join(missing)}")

    return check


def serving_check(is_open: Callable[[], bool]) -> ReadinessCheck:
    """The process is not stopping (its HTTP gate is open)."""

    async def check() -> None:
        if not is_open():
            raise NotReadyError("stopping: draining in-flight work, accepting nothing new")

    return check


def duties_check(roster: DutyRoster) -> ReadinessCheck:
    """Every loop that handles accepted work runs (consumers assigned), not merely started."""

    async def check() -> None:
        unready = roster.unready()
        if unready or not roster.settled:
            raise NotReadyError(f"not yet handling work: {', '.join(unready) or 'roles starting'}")

    return check


def platform_checks(platform: Platform) -> dict[str, ReadinessCheck]:
    """The checks for everything a :class:`Platform` holds, named as ``/readyz`` reports them."""
    return {
        "database": database_check(platform.db),
        "redis": redis_check(platform.redis),
        "kafka": kafka_check(platform.kafka_bootstrap, platform.settings.environment),
    }


async def run_checks(
    checks: Mapping[str, ReadinessCheck], *, timeout: timedelta = DEFAULT_CHECK_TIMEOUT
) -> dict[str, str]:
    """Run every check at once, each bounded by ``timeout``; returns name -> reason for failures.

    Concurrent and bounded so one hung dependency cannot make ``/readyz`` itself hang.
    """
    names = list(checks)
    reasons = await asyncio.gather(*(_reason(checks[name], timeout) for name in names))
    return {name: reason for name, reason in zip(names, reasons, strict=True) if reason is not None}


async def _reason(check: ReadinessCheck, timeout: timedelta) -> str | None:
    try:
        await asyncio.wait_for(check(), timeout.total_seconds())
    except TimeoutError:
        return f"no answer within {timeout.total_seconds():g}s"
    # A boundary: whatever a dependency raises means "not ready", reported, never re-raised.
    except Exception as exc:
        text = str(exc) or "no details"
        return f"{type(exc).__name__}: {text}"[:300]
    return None
