"""Bad input is a 4xx, never a 500 (issue #16): each case the fuzzing found, over a real socket."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from ira.runtime.platform import Platform
from ira.runtime.store import runs
from tests.contracts.test_store import new_run
from tests.dashboard.test_pages import login
from tests.hardening.harness import ADMIN, bearer, raw_exchange, served, status_of


async def make_run(platform: Platform) -> str:
    async with platform.db.transaction() as conn:
        run, _ = await runs.create_run(conn, new_run("demo"), at=datetime.now(UTC))
    return run.run_id


@pytest.mark.parametrize("after", ["99999999999999999999999", "2147483648", "-1", "1e3", "²"])
async def test_an_out_of_range_events_cursor_is_422(platform: Platform, after: str) -> None:
    run_id = await make_run(platform)
    async with served(platform) as (_, client):
        response = await client.get(f"/v1/runs/{run_id}/events", params={"after": after}, headers=bearer(ADMIN))
        largest = await client.get(f"/v1/runs/{run_id}/events", params={"after": 2**31 - 1}, headers=bearer(ADMIN))
    assert response.status_code == 422 and response.json()["errors"][0]["field"] == "query.after"
    assert largest.status_code == 200 and largest.json()["events"] == []


@pytest.mark.parametrize(("name", "value"), [("after", "9" * 30), ("last-event-id", "9" * 30),
                                             ("last-event-id", "²"), ("last-event-id", "1x")])
async def test_a_bad_stream_cursor_is_422_before_the_stream_starts(platform: Platform, name: str, value: str) -> None:
    run_id = await make_run(platform)
    async with served(platform) as (_, client):
        params = {"after": value} if name == "after" else {}
        headers: dict[str, str | bytes] = {**bearer(ADMIN), **({name: value.encode()} if name != "after" else {})}
        response = await client.get(f"/v1/runs/{run_id}/events/stream", params=params, headers=headers)
    assert response.status_code == 422
    assert response.json()["errors"][0]["code"] in ("invalid_cursor", "less_than_equal", "int_parsing")


async def test_a_non_ascii_csrf_header_is_refused_not_a_500(platform: Platform) -> None:
    run_id = await make_run(platform)
    async with served(platform) as (base, client):
        await login(client, ADMIN)
        cookie = "; ".join(f"{k}={v}" for k, v in client.cookies.items())
        head = (f"POST /v1/runs/{run_id}/cancel HTTP/1.1\r\nHost: x\r\nCookie: {cookie}\r\n"
                "Content-Length: 0\r\n").encode() + "X-Ira-CSRF: é²\r\n\r\n".encode()
        answer = await raw_exchange(base, head)
    assert status_of(answer) == 403


@pytest.mark.parametrize("body", [b"token=\xff\xfe", b"token=%ff%fe", b"\x80" * 10, b"&" * 50])
async def test_a_login_form_that_is_not_utf8_is_422(platform: Platform, body: bytes) -> None:
    async with served(platform) as (_, client):
        response = await client.post("/login", content=body,
                                      headers={"content-type": "application/x-www-form-urlencoded"})
    assert response.status_code == 422 and response.json()["errors"][0]["code"] == "invalid_form"


@pytest.mark.parametrize("path", ["/v1/runs/a%00b", "/v1/runs/" + "r" * 201, "/v1/incidents/%C3%A9",
                                  "/v1/runs/a%00b/draft?version=99999999999999999999"])
async def test_ids_outside_their_bounds_are_422(platform: Platform, path: str) -> None:
    async with served(platform) as (_, client):
        response = await client.get(path, headers=bearer(ADMIN))
    assert response.status_code == 422
