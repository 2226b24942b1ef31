"""Outside services the tests need: skip when absent locally, FAIL when absent in CI.

A laptop without PostgreSQL should still run the rest of the suite, but CI (``CI=true``)
must never turn green by skipping the backend it exists to check.
"""

from __future__ import annotations

import asyncio
import os
from concurrent.futures import ThreadPoolExecutor
from typing import NoReturn

import asyncpg
import pytest

DEFAULT_POSTGRES_URL = "postgresql://postgres@127.0.0.1:5432/test"


def require_service(name: str, reason: str) -> NoReturn:
    """A missing service skips a test on a laptop but must not pass silently in CI."""
    message = f"{name} is not available: {reason}"
    if os.environ.get("CI") == "true":
        pytest.fail(message)
    pytest.skip(message)


def postgres_test_url() -> str:
    """The PostgreSQL the tests use: trust auth on loopback unless IRA_TEST_POSTGRES_URL says."""
    return os.environ.get("IRA_TEST_POSTGRES_URL", DEFAULT_POSTGRES_URL)


async def _connect_once(url: str) -> None:
    conn = await asyncpg.connect(url, timeout=3)
    await conn.close()


def postgres_problem(url: str) -> str | None:
    """Why ``url`` cannot be used (unreachable, bad auth, no such database), or None."""
    # A thread of its own: a fresh event loop must not collide with the session's loop.
    with ThreadPoolExecutor(max_workers=1) as pool:
        try:
            pool.submit(asyncio.run, _connect_once(url)).result()
        except (OSError, TimeoutError, asyncpg.PostgresError) as exc:
            return f"{url}: {type(exc).__name__}: {exc}"
    return None


@pytest.fixture(scope="session")
def postgres_url() -> str:
    """A PostgreSQL URL that answered a connection, checked once per session."""
    url = postgres_test_url()
    problem = postgres_problem(url)
    if problem is not None:
        require_service("postgresql", problem)
    return url
