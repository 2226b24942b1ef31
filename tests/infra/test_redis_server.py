"""EmbeddedRedis: a real redis-server on a unix socket (and loopback TCP), gone after stop()."""

from __future__ import annotations

from pathlib import Path

import psutil
from redis.asyncio import Redis

from ira.infra.redis_server import EmbeddedRedis


def is_gone(pid: int) -> bool:
    """Exited; a zombie waiting for its (non-ira) parent to reap it counts as gone."""
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


async def test_embedded_redis_answers_on_its_socket_and_leaves_no_process(tmp_path: Path) -> None:
    server = EmbeddedRedis(tmp_path).start()
    pid = server.pid
    try:
        client = Redis.from_url(server.url)
        assert await client.ping()
        await client.set("k", "v")  # a client still connected must not keep the server alive
        assert server.url == f"unix://{tmp_path / 'redis' / 'redis.sock'}"
    finally:
        server.stop()

    assert pid and is_gone(pid)
    assert server.pid == 0
    assert not (tmp_path / "redis" / "redis.sock").exists()
    await client.aclose()


async def test_embedded_redis_listens_on_loopback_tcp_when_asked(tmp_path: Path) -> None:
    with EmbeddedRedis(tmp_path, tcp_port=0) as server:
        assert server.tcp_url is not None and server.tcp_url.startswith("redis://127.0.0.1:")
        client = Redis.from_url(server.tcp_url)
        assert await client.ping()
        await client.aclose()
        listening = {c.laddr.ip for c in psutil.Process(server.pid).net_connections() if c.status == "LISTEN"}

    assert listening == {"127.0.0.1"}


async def test_a_deep_data_dir_still_gets_a_usable_socket(tmp_path: Path) -> None:
    deep = tmp_path.joinpath(*["nested-directory-name"] * 6)

    with EmbeddedRedis(deep) as server:
        client = Redis.from_url(server.url)
        assert await client.ping()
        await client.aclose()
