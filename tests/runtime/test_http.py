"""The HTTP app: health, readiness against real SQLite and Redis, metrics, one error shape."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import APIRouter, FastAPI
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode
from pydantic import BaseModel
from redis.asyncio import Redis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from starlette.types import Receive, Scope, Send

from ira.core.errors import BrokerUnavailableError, NotFoundError
from ira.infra.redis_server import free_loopback_port
from ira.runtime.http import Lane, create_app
from ira.runtime.readiness import ReadinessCheck, database_check, redis_check
from ira.runtime.store.database import Database
from ira.runtime.store.migrate import upgrade
from ira.runtime.telemetry import Metrics


class Alert(BaseModel):
    name: str
    count: int


def demo_router() -> APIRouter:
    """Routes that fail on purpose, one per kind of failure."""
    router = APIRouter()

    @router.post("/alerts")
    async def accept(alert: Alert) -> dict[str, int]:
        return {"accepted": alert.count}

    @router.get("/runs/{run_id}")
    async def run(run_id: str) -> None:
        raise NotFoundError(f"no run {run_id}")

    @router.get("/broker")
    async def broker() -> None:
        raise BrokerUnavailableError("kafka did not acknowledge", retry_after=timedelta(seconds=2.5))

    @router.get("/bug")
    async def bug() -> None:
        raise RuntimeError("secret internals")

    return router


def client_for(app: FastAPI) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://ira.test")


@pytest.fixture
async def db(tmp_path: Path) -> AsyncIterator[Database]:
    database = Database.create(f"sqlite:///{tmp_path / 'ira.db'}")
    await upgrade(database)
    yield database
    await database.close()


@pytest.fixture
async def redis(redis_url: str) -> AsyncIterator[Redis]:
    client = Redis.from_url(redis_url)
    yield client
    await client.aclose()


async def get(app: FastAPI, path: str) -> httpx.Response:
    async with client_for(app) as client:
        return await client.get(path)


async def test_healthz_answers_ok() -> None:
    response = await get(create_app(metrics=Metrics()), "/healthz")

    assert (response.status_code, response.json()) == (200, {"status": "ok"})


async def test_readyz_is_200_when_database_and_redis_answer(db: Database, redis: Redis) -> None:
    app = create_app(metrics=Metrics(), readiness_checks={"database": database_check(db), "redis": redis_check(redis)})

    response = await get(app, "/readyz")

    assert response.status_code == 200, response.text
    assert response.json() == {"status": "ready", "checked": ["database", "redis"]}


async def test_readyz_is_503_naming_redis_when_it_does_not_answer(db: Database) -> None:
    # No retries: redis-py's default backoff would only turn "refused" into "no answer within 2s".
    closed = Redis(host="127.0.0.1", port=free_loopback_port(), retry=Retry(NoBackoff(), 0))
    checks: dict[str, ReadinessCheck] = {"database": database_check(db), "redis": redis_check(closed)}

    response = await get(create_app(metrics=Metrics(), readiness_checks=checks), "/readyz")
    await closed.aclose()

    assert response.status_code == 503
    body = response.json()
    assert body["status"] == "not_ready"
    assert list(body["failing"]) == ["redis"]
    assert "ConnectionError" in body["failing"]["redis"]


async def test_readyz_reports_pending_migrations(tmp_path: Path) -> None:
    fresh = Database.create(f"sqlite:///{tmp_path / 'fresh.db'}")
    try:
        response = await get(create_app(metrics=Metrics(), readiness_checks={"database": database_check(fresh)}),
                             "/readyz")
    finally:
        await fresh.close()

    assert response.status_code == 503
    assert "ira db upgrade" in response.json()["failing"]["database"]


async def test_readyz_bounds_a_hung_check() -> None:
    async def hangs() -> None:
        await asyncio.Event().wait()

    app = create_app(metrics=Metrics(), readiness_checks={"kafka": hangs}, check_timeout=timedelta(milliseconds=50))

    response = await get(app, "/readyz")

    assert response.status_code == 503
    assert "no answer" in response.json()["failing"]["kafka"]


async def test_metrics_exposes_the_outbox_age_as_prometheus_text() -> None:
    metrics = Metrics()
    metrics.outbox_oldest_unsent_age.set(4.5)

    response = await get(create_app(metrics=metrics), "/metrics")

    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain")
    assert "ira_outbox_oldest_unsent_age_seconds 4.5" in response.text


async def test_invalid_body_is_422_with_one_entry_per_problem() -> None:
    async with client_for(create_app(metrics=Metrics(), routers=[demo_router()])) as client:
        response = await client.post("/alerts", json={"count": "many"})

    assert response.status_code == 422
    errors = response.json()["errors"]
    assert {e["field"] for e in errors} == {"body.name", "body.count"}
    assert all(set(e) == {"code", "message", "field"} and e["code"] and e["message"] for e in errors)


async def test_malformed_json_is_a_client_error_not_a_500() -> None:
    async with client_for(create_app(metrics=Metrics(), routers=[demo_router()])) as client:
        response = await client.post("/alerts", content=b"{not json", headers={"content-type": "application/json"})

    assert response.status_code == 422
    assert response.json()["errors"][0]["code"] == "json_invalid"


@pytest.mark.parametrize(
    ("path", "status", "code"),
    [("/runs/r-1", 404, "not_found"), ("/nowhere", 404, "not_found"), ("/broker", 503, "broker_unavailable")],
)
async def test_errors_have_the_machine_readable_shape(path: str, status: int, code: str) -> None:
    response = await get(create_app(metrics=Metrics(), routers=[demo_router()]), path)

    assert response.status_code == status
    [entry] = response.json()["errors"]
    assert entry["code"] == code and entry["message"] and entry["field"] is None


async def test_unavailable_dependency_says_when_to_retry() -> None:
    response = await get(create_app(metrics=Metrics(), routers=[demo_router()]), "/broker")

    assert response.headers["retry-after"] == "3"


async def test_unexpected_exception_is_a_bare_internal_500(caplog: pytest.LogCaptureFixture) -> None:
    response = await get(create_app(metrics=Metrics(), routers=[demo_router()]), "/bug")

    assert response.status_code == 500
    assert response.json() == {"errors": [{"code": "internal", "message": "internal error", "field": None}]}
    assert "secret internals" not in response.text
    assert any(r.exc_info and "secret internals" in str(r.exc_info[1]) for r in caplog.records)


async def test_requests_are_traced_but_health_probes_are_not() -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    app = create_app(metrics=Metrics(), routers=[demo_router()], tracer_provider=provider)

    async with client_for(app) as client:
        await client.get("/healthz")
        await client.get("/runs/r-7")

    routes = {span.attributes.get("http.route") for span in exporter.get_finished_spans() if span.attributes}
    assert "/runs/{run_id}" in routes
    assert "/healthz" not in routes


# --- lanes: endpoints served ahead of FastAPI -----------------------------------------------


async def echo_lane(scope: Scope, receive: Receive, send: Send) -> None:
    """Answers the path parameters it was given; ``/v1/hooks/x/boom`` fails like a bug."""
    if scope["path_params"]["name"] == "boom":
        raise RuntimeError("secret internals")
    body = json.dumps(scope["path_params"]).encode()
    await send({"type": "http.response.start", "status": 202, "headers": [(b"content-type", b"application/json")]})
    await send({"type": "http.response.body", "body": body})


def laned_app(tracer_provider: TracerProvider | None = None) -> Any:
    lane = Lane(route="/v1/hooks/{kind}/{name}", app=echo_lane)
    return create_app(metrics=Metrics(), routers=[demo_router(), lane], tracer_provider=tracer_provider)


@pytest.mark.parametrize(("path", "served_by"), [
    ("/v1/hooks/alertmanager/am", "lane"),
    ("/v1/hooks/alertmanager/", "fastapi"),  # an empty parameter is no match
    ("/v1/hooks/alertmanager/am/extra", "fastapi"),
    ("/v1/hook/alertmanager/am", "fastapi"),
])
async def test_a_lane_serves_its_route_and_everything_else_reaches_fastapi(path: str, served_by: str) -> None:
    async with client_for(laned_app()) as client:
        response = await client.post(path)
        alerts = await client.post("/alerts", json={"name": "a", "count": 2})

    assert alerts.status_code == 200 and alerts.json() == {"accepted": 2}  # the routers still work
    if served_by == "lane":
        assert (response.status_code, response.json()) == (202, {"kind": "alertmanager", "name": "am"})
    else:
        assert response.status_code == 404 and response.json()["errors"][0]["code"] == "not_found"


async def test_another_method_on_a_lane_is_405_in_the_error_shape() -> None:
    async with client_for(laned_app()) as client:
        response = await client.get("/v1/hooks/alertmanager/am")

    assert response.status_code == 405 and response.headers["allow"] == "POST"
    assert response.json()["errors"][0]["code"] == "method_not_allowed"


async def test_a_failing_lane_is_the_logged_internal_500(caplog: pytest.LogCaptureFixture) -> None:
    async with client_for(laned_app()) as client:
        response = await client.post("/v1/hooks/alertmanager/boom")

    assert response.status_code == 500
    assert response.json() == {"errors": [{"code": "internal", "message": "internal error", "field": None}]}
    assert "secret internals" not in response.text
    assert any(r.exc_info and "secret internals" in str(r.exc_info[1]) for r in caplog.records)


async def test_a_lane_request_is_one_server_span_continuing_the_callers_trace() -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    caller_trace, caller_span = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"

    async with client_for(laned_app(provider)) as client:
        await client.post("/v1/hooks/alertmanager/am", headers={"traceparent": f"00-{caller_trace}-{caller_span}-01"})
        await client.post("/v1/hooks/alertmanager/boom")

    ok, failed = exporter.get_finished_spans()
    assert (ok.name, ok.kind, ok.attributes["http.route"], ok.attributes["http.response.status_code"]) == (
        "POST /v1/hooks/{kind}/{name}", SpanKind.SERVER, "/v1/hooks/{kind}/{name}", 202)
    assert ok.parent is not None and (f"{ok.context.trace_id:032x}", f"{ok.parent.span_id:016x}") == (
        caller_trace, caller_span)
    assert failed.attributes["http.response.status_code"] == 500 and failed.status.status_code is StatusCode.ERROR


async def test_docs_work_offline_and_list_the_lanes() -> None:
    from ira.sources.api import OPENAPI, PATH

    async def nothing(scope: Scope, receive: Receive, send: Send) -> None:
        raise AssertionError("not called")

    app = create_app(metrics=Metrics(), routers=[Lane(route=PATH, app=nothing, openapi=OPENAPI)])
    async with client_for(app) as client:  # type: ignore[arg-type]
        page = await client.get("/docs")
        script = await client.get("/docs/assets/swagger-ui-bundle.js")
        schema = (await client.get("/openapi.json")).json()
    assert page.status_code == 200 and "/docs/assets/swagger-ui-bundle.js" in page.text
    assert "https://" not in page.text and "cdn" not in page.text.lower()  # nothing is fetched from outside
    assert script.status_code == 200 and len(script.content) > 100_000
    webhook = schema["paths"][PATH]["post"]
    assert webhook["parameters"][0]["schema"]["enum"] == ["alertmanager", "grafana", "generic", "change"]
    assert set(webhook["responses"]) >= {"202", "401", "413", "422", "429", "503"}
    assert "/healthz" in schema["paths"]
