"""The edge's script call on a real Redis: packed as redis-py packs it, loaded when Redis does not
know it, and carried on over a held connection that the server closed between two calls."""

from __future__ import annotations

import uuid

import pytest
from redis.asyncio import Redis
from redis.asyncio.connection import Connection
from redis.exceptions import ResponseError

from ira.sources.held_script import HeldScript, pack


def test_a_command_is_packed_as_redis_py_packs_it() -> None:
    parts = (("EVALSHA", "f" * 40, "2"), ["ira:{am}:rate:1", "ira:{é}:seen:x"], ["1", "", "10 20 check 1.5"])

    assert pack(*parts) == b"".join(Connection().pack_command(*(text for part in parts for text in part)))


async def test_a_script_redis_does_not_know_is_loaded_and_called(redis: Redis) -> None:
    script = HeldScript(redis, f"return ARGV[1] .. KEYS[1] -- {uuid.uuid4().hex}")  # a SHA never loaded before

    assert await script(["k"], ["v"]) == b"vk"
    assert await script(["k2"], ["w"]) == b"wk2"


async def test_a_held_connection_the_server_closed_is_connected_again(redis: Redis) -> None:
    script = HeldScript(redis, "return KEYS[1]")
    assert await script(["before"], []) == b"before"
    [held] = script._idle
    host, port = held._writer.get_extra_info("sockname")[:2]

    assert await redis.execute_command("CLIENT", "KILL", "ADDR", f"{host}:{port}", "SKIPME", "yes") == 1

    assert await script(["after"], []) == b"after"


async def test_an_error_of_the_script_reaches_the_caller_and_the_next_call_works(redis: Redis) -> None:
    script = HeldScript(redis, "if ARGV[1] == 'fail' then return redis.error_reply('refused') end return ARGV[1]")

    with pytest.raises(ResponseError, match="refused"):
        await script([], ["fail"])
    assert await script([], ["ok"]) == b"ok"
