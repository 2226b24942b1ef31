"""``GET /v1/incidents`` and ``/v1/incidents/{id}``: what triage decided, and why, per tenant."""

from __future__ import annotations

import httpx
import pytest
from fastapi import FastAPI

from ira.core.clock import FrozenClock
from ira.dashboard.api import build_read_api
from ira.runtime.http import create_app
from ira.runtime.settings import Settings
from ira.runtime.store.database import Database
from ira.runtime.telemetry import Metrics
from tests.triage.builders import T0, alert, resolved
from tests.triage.harness import apply, handler, minutes, start_run

ACME, OTHER = "acme-viewer-token", "other-viewer-token"


@pytest.fixture
def app(db: Database) -> FastAPI:
    settings = Settings.model_validate({
        "database_url": "sqlite:///unused.db",
        "api_tokens": [
            {"token": ACME, "principal": "ann", "roles": ["viewer"], "tenant": "acme"},
            {"token": OTHER, "principal": "oz", "roles": ["viewer"], "tenant": "other"},
        ],
    })
    return create_app(metrics=Metrics(), routers=[build_read_api(settings, db)])


async def get(app: FastAPI, path: str, token: str | None = ACME) -> httpx.Response:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://test") as client:
        return await client.get(path, headers=headers)


async def test_an_incident_shows_its_alerts_evaluations_with_basis_and_runs(app: FastAPI, db: Database) -> None:
    triage = handler(FrozenClock(T0))
    opened = await apply(db, triage, alert(fingerprint="fp-1"))
    run_id = await start_run(db, opened.incident_id)
    await apply(db, triage, resolved(fingerprint="fp-1", at=T0 + minutes(1)))

    listed = await get(app, "/v1/incidents")
    detail = await get(app, f"/v1/incidents/{opened.incident_id}")

    assert listed.status_code == 200
    assert [i["incident_id"] for i in listed.json()["incidents"]] == [opened.incident_id]
    body = detail.json()
    assert (body["status"], body["version"], body["firing_count"]) == ("resolved", 2, 0)
    assert [a["status"] for a in body["alerts"]] == ["firing", "resolved"]
    assert [(e["decision"], e["reason"]) for e in body["evaluations"]] == [
        ("create_run", "new_incident"), ("deliver", "run_subscribed")]
    assert body["evaluations"][1]["basis"]["run_id"] == run_id
    assert [(r["run_id"], r["state"]) for r in body["runs"]] == [(run_id, "pending")]


async def test_incidents_filter_by_status(app: FastAPI, db: Database) -> None:
    triage = handler(FrozenClock(T0))
    await apply(db, triage, alert(service="checkout"))
    await apply(db, triage, alert(service="payments", fingerprint="fp-2"))
    await apply(db, triage, resolved(service="payments", fingerprint="fp-2", at=T0 + minutes(1)))

    open_ = (await get(app, "/v1/incidents?status=open")).json()["incidents"]
    resolved_ = (await get(app, "/v1/incidents?status=resolved")).json()["incidents"]

    assert [i["service"] for i in open_] == ["checkout"]
    assert [i["service"] for i in resolved_] == ["payments"]
    assert (await get(app, "/v1/incidents?status=bogus")).status_code == 422


async def test_another_tenants_incident_is_not_found(app: FastAPI, db: Database) -> None:
    opened = await apply(db, handler(FrozenClock(T0)), alert())

    assert (await get(app, "/v1/incidents", token=OTHER)).json() == {"incidents": []}
    response = await get(app, f"/v1/incidents/{opened.incident_id}", token=OTHER)
    assert response.status_code == 404
    assert response.json()["errors"][0]["code"] == "not_found"


@pytest.mark.parametrize(("token", "status"), [(None, 401), ("not-a-known-token", 401)])
async def test_the_api_needs_a_known_token(app: FastAPI, token: str | None, status: int) -> None:
    response = await get(app, "/v1/incidents", token=token)

    assert response.status_code == status
    assert response.json()["errors"][0]["code"] == "unauthenticated"


async def test_secrets_in_an_alerts_text_are_masked_where_the_incident_is_shown(app: FastAPI, db: Database) -> None:
    leaky = alert(labels={"team": "pay"}).model_copy(update={"annotations": {
        "summary": "payments down, STRIPE_API_KEY=sk_live_4eC39HqLyjWDarjtT1zdp7dc",
        "description": "curl -H 'Authorization: Bearer abcdef0123456789'"}})
    opened = await apply(db, handler(FrozenClock(T0)), leaky)

    listed = (await get(app, "/v1/incidents")).text
    detail = await get(app, f"/v1/incidents/{opened.incident_id}")

    for secret in ("4eC39HqLyjWDarjtT1zdp7dc", "abcdef0123456789"):
        assert secret not in listed and secret not in detail.text
    assert detail.json()["title"] == "payments down, STRIPE_API_KEY=[REDACTED]"
    assert detail.json()["alerts"][0]["labels"]["team"] == "pay"
