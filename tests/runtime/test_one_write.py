"""A response's head leaves with its body in one write (``ira.runtime.deadline.OneWriteTransport``),
on a real socket pair: what the peer can read shows what was sent."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import httpx

from ira.runtime.deadline import OneWriteTransport, header_deadline
from ira.runtime.http import create_app
from ira.runtime.platform import Platform
from tests.eventually import eventually
from tests.serving import serve

HEAD = b"HTTP/1.1 202 Accepted\r\ncontent-type: application/json\r\ncontent-length: 2\r\n\r\n"


@asynccontextmanager
async def connected() -> AsyncIterator[tuple[OneWriteTransport, socket.socket]]:
    """A OneWriteTransport over a real asyncio transport, and the socket at the other end."""
    ours, peer = socket.socketpair()
    peer.setblocking(False)
    transport, _ = await asyncio.get_running_loop().connect_accepted_socket(asyncio.Protocol, ours)
    try:
        yield OneWriteTransport(transport), peer
    finally:
        transport.close()
        peer.close()


def pending(peer: socket.socket) -> bytes:
    try:
        return peer.recv(65536)
    except BlockingIOError:
        return b""


async def test_a_head_is_sent_with_its_body_in_one_write() -> None:
    async with connected() as (transport, peer):
        transport.write(HEAD)
        assert pending(peer) == b""  # held: nothing on the wire yet
        transport.write(b"{}")
        assert pending(peer) == HEAD + b"{}"  # one send, head and body together


async def test_a_head_without_a_body_yet_is_sent_at_the_end_of_the_loop_iteration() -> None:
    async with connected() as (transport, peer):
        transport.write(HEAD)
        received = await eventually(lambda: pending(peer), timeout=5, interval=0.01,
                                    message="the held head was sent")
        assert received == HEAD
        transport.write(b"{}")  # a streamed body's chunk goes out at once
        assert pending(peer) == b"{}"


async def test_a_held_head_is_sent_before_the_connection_closes() -> None:
    async with connected() as (transport, peer):
        transport.write(HEAD)
        transport.close()
        assert await eventually(lambda: pending(peer), timeout=5, interval=0.01) == HEAD


async def test_other_writes_go_out_at_once() -> None:
    async with connected() as (transport, peer):
        transport.write(b"HTTP/1.1 100 Continue")  # not a complete head
        assert pending(peer) == b"HTTP/1.1 100 Continue"


async def test_responses_through_uvicorn_keep_their_order_on_a_kept_alive_connection(platform: Platform) -> None:
    async with serve(create_app(metrics=platform.metrics), http=header_deadline()) as base, \
            httpx.AsyncClient(base_url=base) as client:
        answers = [await client.get(path) for path in ("/healthz", "/nowhere", "/healthz")]
    assert [a.status_code for a in answers] == [200, 404, 200]
    assert answers[0].json() == {"status": "ok"} and answers[1].json()["errors"][0]["code"] == "not_found"
