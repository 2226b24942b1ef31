"""EmbeddedRedis: a real redis-server on a unix socket (and loopback TCP), gone after stop()."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from pathlib import Path

import psutil
from redis.asyncio import Redis
from redis.exceptions import ConnectionError as RedisConnectionError

from ira.infra.redis_server import EmbeddedRedis
from tests.eventually import eventually


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


async def test_a_server_left_by_a_killed_owner_is_adopted_not_doubled(tmp_path: Path) -> None:
    # Given a server whose owner died without stopping it (as after kill -9 of ira dev)
    first = EmbeddedRedis(tmp_path).start()
    orphan = first.pid
    client = Redis.from_url(first.url)
    await client.set("dedupe-mark", "1")

    # When the next owner starts on the same data dir
    second = EmbeddedRedis(tmp_path).start()
    try:
        # Then it adopts the running server: one redis-server, its data intact
        assert second.pid == orphan
        assert await client.get("dedupe-mark") == b"1"
        assert servers_on(second.socket_path) == {orphan}
    finally:
        second.stop()
    assert is_gone(orphan)
    assert not second.pid_path.exists()
    await client.aclose()
    first._server = None  # type: ignore[attr-defined]  # the dead owner's handle must not stop anything


async def test_a_recorded_server_that_does_not_answer_is_stopped_before_a_new_one_starts(tmp_path: Path) -> None:
    first = EmbeddedRedis(tmp_path).start()
    orphan = first.pid
    first.socket_path.unlink()  # alive, but no longer reachable where the next owner looks

    second = EmbeddedRedis(tmp_path).start()
    try:
        assert is_gone(orphan)
        assert second.pid != orphan
        client = Redis.from_url(second.url)
        assert await client.ping()
        await client.aclose()
    finally:
        second.stop()
    first._server = None  # type: ignore[attr-defined]


async def test_keep_alive_restarts_a_server_that_died(tmp_path: Path) -> None:
    server = EmbeddedRedis(tmp_path).start()
    watchdog = asyncio.create_task(server.keep_alive(interval=timedelta(milliseconds=100)))
    client = Redis.from_url(server.url)
    try:
        died = server.pid
        psutil.Process(died).kill()
        await eventually(lambda: server.restarts == 1 and server.is_running(), timeout=20, message="restarted")
        assert server.pid != died

        async def answers() -> bool:
            try:
                return bool(await client.ping())
            except RedisConnectionError:
                return False

        await eventually(answers, timeout=10, message="the same client reconnects")
    finally:
        watchdog.cancel()
        await asyncio.gather(watchdog, return_exceptions=True)
        server.stop()
        await client.aclose()


def servers_on(socket_path: Path) -> set[int]:
    """Pids of the redis-servers listening on ``socket_path`` (two would be the bug)."""
    found = set()
    for process in psutil.process_iter(["name"]):
        if process.info["name"] != "redis-server":
            continue
        try:
            if any(c.laddr == str(socket_path) for c in process.net_connections(kind="unix")):
                found.add(process.pid)
        except psutil.Error:
            continue
    return found
