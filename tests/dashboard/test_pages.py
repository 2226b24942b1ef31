"""The dashboard as a browser sees it: login, tenant-scoped pages, the live event stream."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from datetime import UTC, datetime

import httpx
import pytest_asyncio
from fastapi import APIRouter, Depends

from ira.core.commit import EventDraft
from ira.core.events import RunEventType
from ira.dashboard.main import role
from ira.runtime.auth import SESSION_COOKIE, Principal, csrf_token, principal_for
from ira.runtime.http import create_app
from ira.runtime.platform import Platform
from ira.runtime.session import Sessions
from ira.runtime.store import runs
from tests.contracts.test_store import new_run
from tests.serving import serve

ADMIN = "dev-admin-token"


@pytest_asyncio.fixture(loop_scope="session")
async def client(platform: Platform) -> AsyncIterator[httpx.AsyncClient]:
    """The dashboard served by a real uvicorn on loopback (SSE needs a real streaming server)."""
    probe = APIRouter()

    sessions = Sessions(platform.db, clock=platform.clock)

    @probe.post("/v1/probe")
    async def changed(caller: Principal = Depends(principal_for(platform.settings, sessions))) -> dict[str, str]:
        return {"by": caller.name}

    app = create_app(metrics=platform.metrics, routers=[*role.routers(platform), probe])
    async with serve(app) as base_url, httpx.AsyncClient(base_url=base_url) as http:
        yield http


async def make_run(platform: Platform, tenant: str) -> str:
    async with platform.db.transaction() as conn:
        run, _ = await runs.create_run(conn, new_run(tenant), at=datetime.now(UTC))
    return run.run_id


async def login(client: httpx.AsyncClient, token: str = ADMIN) -> None:
    response = await client.post("/login", content=f"token={token}",
                                 headers={"content-type": "application/x-www-form-urlencoded"})
    assert response.status_code == 303


async def test_pages_need_a_login(client: httpx.AsyncClient) -> None:
    response = await client.get("/")
    assert response.status_code == 303 and response.headers["location"] == "/login"
    bad = await client.post("/login", content="token=nope",
                            headers={"content-type": "application/x-www-form-urlencoded"})
    assert bad.headers["location"].startswith("/login?error")
    assert SESSION_COOKIE not in client.cookies


async def test_runs_page_lists_only_the_viewers_tenant(client: httpx.AsyncClient, platform: Platform) -> None:
    mine, theirs = await make_run(platform, "demo"), await make_run(platform, "globex")
    await login(client)
    page = (await client.get("/runs")).text
    assert mine in page and theirs not in page
    assert (await client.get(f"/runs/{theirs}")).status_code == 404


async def test_run_page_shows_steps_and_events(client: httpx.AsyncClient, platform: Platform) -> None:
    run_id = await make_run(platform, "demo")
    await login(client)
    page = await client.get(f"/runs/{run_id}")
    assert page.status_code == 200
    assert "RUN_CREATED" in page.text and "metrics" in page.text and "/static/run.js" in page.text
    assert (await client.get("/static/run.js")).status_code == 200


async def test_run_page_shows_the_runs_trace_id(client: httpx.AsyncClient, platform: Platform) -> None:
    trace_id = "4bf92f3577b34da6a3ce929d0e0e4736"
    traced = new_run("demo").model_copy(update={"traceparent": f"00-{trace_id}-00f067aa0ba902b7-01"})
    async with platform.db.transaction() as conn:
        run, _ = await runs.create_run(conn, traced, at=datetime.now(UTC))
    run_id = run.run_id
    await login(client)
    page = (await client.get(f"/runs/{run_id}")).text
    assert f'<span class="meta mono" id="trace">trace {trace_id}</span>' in page


async def test_event_stream_resumes_after_last_event_id(client: httpx.AsyncClient, platform: Platform) -> None:
    run_id = await make_run(platform, "demo")
    async with platform.db.transaction() as conn:
        await runs.append_events(conn, "demo", run_id, [EventDraft(type=RunEventType.STEP_READY),
            EventDraft(type=RunEventType.AGENT_TURN)],
                                 at=datetime.now(UTC))
    seen: list[tuple[int, str]] = []

    async def read_stream() -> None:
        headers = {"authorization": f"Bearer {ADMIN}", "last-event-id": "1"}
        async with client.stream("GET", f"/v1/runs/{run_id}/events/stream", headers=headers) as response:
            assert response.headers["content-type"].startswith("text/event-stream")
            async for line in response.aiter_lines():
                if line.startswith("data: "):
                    event = json.loads(line[6:])
                    seen.append((event["run_seq"], event["type"]))
                    if event["type"] == "JOINED":
                        return

    reader = asyncio.create_task(read_stream())
    async with platform.db.transaction() as conn:  # committed while the client is connected
        await runs.append_events(conn, "demo", run_id, [EventDraft(type=RunEventType.JOINED)], at=datetime.now(UTC))
    await asyncio.wait_for(reader, timeout=10)
    assert seen == [(2, "STEP_READY"), (3, "AGENT_TURN"), (4, "JOINED")]


async def test_another_tenants_stream_is_not_found(client: httpx.AsyncClient, platform: Platform) -> None:
    theirs = await make_run(platform, "globex")
    response = await client.get(f"/v1/runs/{theirs}/events/stream", headers={"authorization": f"Bearer {ADMIN}"})
    assert response.status_code == 404


async def test_cookie_changes_need_the_csrf_header(client: httpx.AsyncClient) -> None:
    await login(client)
    refused = await client.post("/v1/probe")
    assert refused.status_code == 403 and refused.json()["errors"][0]["code"] == "forbidden"
    allowed = await client.post("/v1/probe", headers={"x-ira-csrf": csrf_token(client.cookies[SESSION_COOKIE])})
    assert allowed.status_code == 200 and allowed.json() == {"by": "admin"}


async def test_health_page_reports_dependencies(client: httpx.AsyncClient) -> None:
    await login(client)
    page = await client.get("/health")
    assert page.status_code == 200 and "database" in page.text and "redis" in page.text
