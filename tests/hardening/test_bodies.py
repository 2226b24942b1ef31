"""Bodies are bounded before they are read, and a bearer route checks its token first."""

from __future__ import annotations

import asyncio

import pytest

from ira.runtime.platform import Platform
from tests.hardening.harness import ADMIN, VIEWER, bearer, served, status_of

MIB = 1024 * 1024


async def open_request(base: str, head: str) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    host, port = base.removeprefix("http://").split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    writer.write(head.encode())
    await writer.drain()
    return reader, writer


@pytest.mark.parametrize(("token", "expected"), [(None, 413), (ADMIN, 413)])
async def test_a_declared_50_mib_body_is_refused_before_it_is_sent(
    platform: Platform, token: str | None, expected: int,
) -> None:
    async with served(platform) as (base, _):
        auth = f"Authorization: Bearer {token}\r\n" if token else ""
        reader, writer = await open_request(
            base, f"POST /v1/runs/x/cancel HTTP/1.1\r\nHost: x\r\n{auth}Content-Length: {50 * MIB}\r\n\r\n")
        answer = await asyncio.wait_for(reader.read(65536), 10)  # not one body byte was sent
        writer.close()
    assert status_of(answer) == expected and b"payload_too_large" in answer


async def test_a_bearer_route_answers_401_before_reading_the_body(platform: Platform) -> None:
    async with served(platform) as (base, _):
        reader, writer = await open_request(
            base, "POST /v1/runs/x/cancel HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                  f"Content-Length: {60 * 1024}\r\n\r\n")
        answer = await asyncio.wait_for(reader.read(65536), 10)  # under the limit, but never sent
        closed = await asyncio.wait_for(reader.read(1), 10)
        writer.close()
    assert status_of(answer) == 401 and b"connection: close" in answer.lower() and closed == b""


async def test_a_viewer_is_refused_403_before_the_body_is_read(platform: Platform) -> None:
    async with served(platform) as (base, _):
        reader, writer = await open_request(
            base, f"POST /v1/runs/x/cancel HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {VIEWER}\r\n"
                  f"Content-Type: application/json\r\nContent-Length: {60 * 1024}\r\n\r\n")
        answer = await asyncio.wait_for(reader.read(65536), 10)  # the body is never sent
        writer.close()
    assert status_of(answer) == 403 and b"connection: close" in answer.lower()


async def test_a_chunked_body_is_counted_as_it_arrives(platform: Platform) -> None:
    async with served(platform) as (base, _):
        reader, writer = await open_request(
            base, "POST /v1/runs/x/cancel HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                  f"Authorization: Bearer {ADMIN}\r\nTransfer-Encoding: chunked\r\n\r\n")
        chunk = b"x" * 16384
        for _ in range(5):  # 80 KiB, over the 64 KiB default
            writer.write(f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n")
        await writer.drain()
        answer = await asyncio.wait_for(reader.read(65536), 10)
        writer.close()
    assert status_of(answer) == 413 and b"payload_too_large" in answer


async def test_an_approval_reason_over_4000_characters_is_422(platform: Platform) -> None:
    async with served(platform) as (_, client):
        response = await client.post("/v1/approvals/apr_x/decision", headers=bearer(ADMIN),
                                     json={"decision": "approve", "reason": "r" * 4001})
        cancel = await client.post("/v1/runs/run_x/cancel", headers=bearer(ADMIN), json={"reason": "r" * 4001})
    assert response.status_code == 422 and response.json()["errors"][0]["field"] == "body.reason"
    assert cancel.status_code == 422


async def test_an_unparseable_content_length_is_400(platform: Platform) -> None:
    async with served(platform) as (base, _):
        reader, writer = await open_request(
            base, f"POST /v1/runs/x/cancel HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {ADMIN}\r\n"
                  "Content-Length: ²\r\n\r\n")
        answer = await asyncio.wait_for(reader.read(65536), 10)
        writer.close()
    assert 400 <= status_of(answer) < 500


async def test_lanes_and_fastapi_map_errors_alike(platform: Platform) -> None:
    """One mapping (ira.runtime.http_errors): a 401 names the Bearer scheme on a FastAPI route
    and on the webhook lane alike, in the same error shape."""
    async with served(platform) as (_, client):
        api = await client.post("/v1/runs/x/cancel")
        lane = await client.post("/v1/sources/alertmanager/am", json=[])
    for response in (api, lane):
        assert response.status_code == 401 and response.headers["www-authenticate"] == "Bearer"
        assert set(response.json()["errors"][0]) >= {"code", "message", "field"}
