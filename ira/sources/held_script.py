"""A Lua script called on held connections, its command packed in one pass: the edge's Redis call.

redis-py 8's ``Script.__call__`` cost ~100 µs of CPU per call here (loopback, one key): the
pool's lock and its observability counters, a ``wait_for`` task around every send, the retry
wrapper, ``EVALSHA``'s arguments packed one at a time through its encoder (~4 µs each, and an
edge call carries four per request). This keeps what matters of redis-py, its ``Connection``
(connect, AUTH, SELECT, TLS, the RESP parser, disconnect on error), and drops the rest: a
connection is taken from the client's pool once and held between calls (the pool still counts
it and closes it with the client; before each call it is checked as the pool checks one it
lends, so a connection the server closed meanwhile is connected again), the command is packed
here in one pass, and a ``NOSCRIPT`` reply loads the script and sends the call again on the
same connection.

A call that fails is not sent again: it may have run (a claim that set marks), so its error
goes to the caller, the connection goes back to the pool disconnected, and the next call
takes another one.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any

from redis.asyncio import Redis
from redis.asyncio.connection import AbstractConnection
from redis.exceptions import NoScriptError


def pack(*parts: Sequence[str]) -> bytes:
    """One RESP command (an array of bulk strings) of the strings of ``parts``, in order."""
    count = sum(len(part) for part in parts)
    out = [b"*%d\r\n" % count]
    for part in parts:
        for text in part:
            data = text.encode()
            out.append(b"$%d\r\n%s\r\n" % (len(data), data))
    return b"".join(out)


class HeldScript:
    """``await script(keys, args)``: the script's reply (see the module docstring)."""

    def __init__(self, redis: Redis, source: str) -> None:
        self._redis, self._source = redis, source
        self._sha = hashlib.sha1(source.encode()).hexdigest()  # noqa: S324 - Redis names scripts by SHA-1
        self._load = pack(("SCRIPT", "LOAD", source))
        self._idle: list[AbstractConnection] = []
        """Connections held between calls; one per call in flight at most."""

    async def __call__(self, keys: Sequence[str], args: Sequence[str]) -> Any:
        command = pack(("EVALSHA", self._sha, str(len(keys))), keys, args)
        pool = self._redis.connection_pool
        if self._idle:
            connection = self._idle.pop()
            try:  # what the pool checks before it lends one: closed since its last call -> connected again
                await pool.ensure_connection(connection)
            except BaseException:
                await pool.release(connection)
                raise
        else:
            connection = await pool.get_connection()
        try:
            reply = await self._send(connection, command)
        except BaseException:
            await connection.disconnect(nowait=True)
            await pool.release(connection)
            raise
        self._idle.append(connection)
        return reply

    async def _send(self, connection: AbstractConnection, command: bytes) -> Any:
        await connection.send_packed_command(command, check_health=False)
        try:
            return await connection.read_response()
        except NoScriptError:  # a Redis restarted or flushed since: load it, then the call again
            await connection.send_packed_command(self._load, check_health=False)
            await connection.read_response()
            await connection.send_packed_command(command, check_health=False)
            return await connection.read_response()
