"""Slow clients are cut off, and everyone else is still served (issue #16).

Fifty connections trickle their headers one byte at a time and never finish them; each is
closed once the header deadline passes, while a normal request on another connection gets
its answer. A body that stalls is answered 408 once the body deadline passes.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta

import httpx

from ira.dashboard.main import role
from ira.runtime.deadline import header_deadline
from ira.runtime.http import create_app
from ira.runtime.platform import Platform
from tests.eventually import eventually
from tests.hardening.harness import status_of
from tests.serving import serve

HEADER_TIMEOUT = timedelta(seconds=1)
STALLED = 50


async def trickle(base: str, closed: list[bool], index: int) -> None:
    """Send a request line, then one header byte every 100 ms (at most 600 bytes); note the close."""
    host, port = base.removeprefix("http://").split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    eof = asyncio.create_task(reader.read(1))
    try:
        writer.write(b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: ")
        for _ in range(600):  # a minute at most; the deadline ends it long before
            if eof.done():
                break
            writer.write(b"a")
            await asyncio.wait({eof}, timeout=0.1)  # the pace of a slow client, not a synchronisation
        closed[index] = eof.done() and not eof.cancelled() and eof.result() == b""
    except (ConnectionError, OSError):
        closed[index] = True
    finally:
        eof.cancel()
        writer.close()


async def test_stalled_headers_are_closed_within_the_timeout_while_others_are_served(platform: Platform) -> None:
    app = create_app(metrics=platform.metrics)
    async with serve(app, http=header_deadline(HEADER_TIMEOUT)) as base:
        closed = [False] * STALLED
        slow = [asyncio.create_task(trickle(base, closed, i)) for i in range(STALLED)]
        async with httpx.AsyncClient(base_url=base) as client:
            assert (await client.get("/healthz")).status_code == 200  # served while fifty stall
        await eventually(lambda: all(task.done() for task in slow), timeout=10 * HEADER_TIMEOUT.total_seconds(),
                         message="every stalled connection was closed")
        async with httpx.AsyncClient(base_url=base) as client:
            assert (await client.get("/healthz")).status_code == 200
    assert all(closed)


async def test_a_connection_that_sends_nothing_is_closed(platform: Platform) -> None:
    async with serve(create_app(metrics=platform.metrics), http=header_deadline(HEADER_TIMEOUT)) as base:
        host, port = base.removeprefix("http://").split(":")
        reader, writer = await asyncio.open_connection(host, int(port))
        assert await asyncio.wait_for(reader.read(1), 10 * HEADER_TIMEOUT.total_seconds()) == b""
        writer.close()


async def test_a_kept_alive_connection_is_cut_when_its_second_request_stalls(platform: Platform) -> None:
    async with serve(create_app(metrics=platform.metrics), http=header_deadline(HEADER_TIMEOUT)) as base:
        host, port = base.removeprefix("http://").split(":")
        reader, writer = await asyncio.open_connection(host, int(port))
        writer.write(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        first = await asyncio.wait_for(reader.readuntil(b'{"status":"ok"}'), 10)
        writer.write(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")  # and never the blank line
        rest = await asyncio.wait_for(reader.read(65536), 10 * HEADER_TIMEOUT.total_seconds())
        writer.close()
    assert status_of(first) == 200 and rest == b""


async def test_a_stalled_body_is_answered_408(platform: Platform) -> None:
    app = create_app(metrics=platform.metrics, routers=role.routers(platform), body_timeout=HEADER_TIMEOUT)
    async with serve(app, http=header_deadline(HEADER_TIMEOUT)) as base:
        host, port = base.removeprefix("http://").split(":")
        reader, writer = await asyncio.open_connection(host, int(port))
        writer.write(b"POST /login HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-www-form-urlencoded\r\n"
                     b"Content-Length: 100\r\n\r\ntoken=")
        answer = await asyncio.wait_for(reader.read(65536), 10 * HEADER_TIMEOUT.total_seconds())
        writer.close()
    assert status_of(answer) == 408 and b"body_timeout" in answer


async def test_headers_over_64_kib_are_refused_431_while_normal_ones_pass(platform: Platform) -> None:
    async with serve(create_app(metrics=platform.metrics), http=header_deadline(HEADER_TIMEOUT)) as base:
        host, port = base.removeprefix("http://").split(":")
        reader, writer = await asyncio.open_connection(host, int(port))
        writer.write(b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: ")
        for _ in range(64):  # 1 MiB of one header, as fast as the socket takes it
            if writer.is_closing():
                break
            writer.write(b"a" * 16384)
            try:
                await writer.drain()
            except ConnectionError:
                break
        answer = await asyncio.wait_for(reader.read(65536), 10)
        writer.close()
        async with httpx.AsyncClient(base_url=base) as client:
            normal = await client.get("/healthz", headers={"x-fine": "b" * 8192})
    assert status_of(answer) == 431 and b"headers_too_large" in answer
    assert normal.status_code == 200
