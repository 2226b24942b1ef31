"""What ``ira dev --demo`` says when it cannot see its run: the API's answer, never silence."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import httpx
from fastapi import FastAPI
from fastapi.responses import JSONResponse

from ira.infra.demo.outcome import explain_demo

SINCE = datetime(2026, 12, 5, 12, 0, tzinfo=UTC)


def api(runs: list[dict[str, str]], *, status: int = 200) -> httpx.AsyncClient:
    """A real ASGI app answering the two reads the demo makes (no incidents)."""
    app = FastAPI()

    @app.get("/v1/runs")
    async def list_runs() -> JSONResponse:
        body = {"runs": runs} if status == 200 else {"error": "unauthenticated", "message": "bad token"}
        return JSONResponse(body, status_code=status)

    @app.get("/v1/incidents")
    async def list_incidents() -> dict[str, list[object]]:
        return {"incidents": []}

    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://ira")


async def explained(client: httpx.AsyncClient) -> list[str]:
    said: list[str] = []
    async with client:
        await explain_demo(client, url="http://ira", since=SINCE, say=said.append, wait=timedelta(seconds=0.2))
    return said


async def test_an_error_answer_is_said_when_the_demo_gives_up() -> None:
    said = await explained(api([], status=401))
    assert said == ["demo      no run yet; watch http://ira/ (last problem: GET /v1/runs answered 401)"]


async def test_a_run_older_than_the_demo_is_not_taken_for_it_and_the_listing_is_said() -> None:
    older = {"run_id": "run_1", "created_at": (SINCE - timedelta(seconds=1)).isoformat()}
    said = await explained(api([older]))
    assert len(said) == 1 and said[0].startswith("demo      no run yet; watch http://ira/ (1 run(s) listed, the newest "
                                                 "created 2026-12-05T11:59:59+00:00; looking for one created since")


async def test_the_demo_run_is_found() -> None:
    run = {"run_id": "run_2", "created_at": (SINCE + timedelta(seconds=1)).isoformat().replace("+00:00", "Z")}
    said = await explained(api([run]))
    assert said == ["demo      run started: http://ira/runs/run_2 (its ticket draft will wait for your approval)"]
