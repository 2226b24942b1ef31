"""A minimal HTTP/1.1 keep-alive client for load in tests.

httpx's AsyncClient spends milliseconds per request in its pool once hundreds of requests
wait (and more on loopback when it writes headers and body separately), which would make a
thousand posts take most of a minute. This writes one request per write, reads the
status line, headers and a Content-Length body, and nothing else: enough for ira's answers.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from urllib.parse import urlsplit


@dataclass(frozen=True)
class RawResponse:
    status: int
    headers: Mapping[str, str]
    body: bytes


class RawConnection:
    """One keep-alive connection; one request at a time."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, host: str) -> None:
        self._reader, self._writer, self._host = reader, writer, host

    @classmethod
    async def open(cls, base_url: str) -> RawConnection:
        parts = urlsplit(base_url)
        reader, writer = await asyncio.open_connection(parts.hostname, parts.port)
        return cls(reader, writer, f"{parts.hostname}:{parts.port}")

    async def post(self, path: str, body: bytes, headers: Mapping[str, str]) -> RawResponse:
        lines = [f"POST {path} HTTP/1.1", f"Host: {self._host}", f"Content-Length: {len(body)}",
                 "Content-Type: application/json", *(f"{k}: {v}" for k, v in headers.items())]
        self._writer.write(("\r\n".join(lines) + "\r\n\r\n").encode() + body)
        status = int((await self._reader.readline()).split()[1])
        found: dict[str, str] = {}
        while (line := await self._reader.readline()) not in (b"\r\n", b""):
            name, _, value = line.decode("latin-1").partition(":")
            found[name.strip().lower()] = value.strip()
        return RawResponse(status, found, await self._reader.readexactly(int(found.get("content-length", "0"))))

    async def close(self) -> None:
        self._writer.close()
        await self._writer.wait_closed()


async def post_many(base_url: str, path: str, bodies: Sequence[bytes], headers: Mapping[str, str], *,
                    connections: int = 50) -> list[RawResponse]:
    """POST every body over ``connections`` keep-alive connections at once; answers in body order."""
    answers: list[RawResponse | None] = [None] * len(bodies)
    pending = iter(range(len(bodies)))

    async def sender() -> None:
        connection = await RawConnection.open(base_url)
        try:
            for index in pending:
                answers[index] = await connection.post(path, bodies[index], headers)
        finally:
            await connection.close()

    await asyncio.gather(*(sender() for _ in range(min(connections, len(bodies)))))
    return [answer for answer in answers if answer is not None]
