"""A run of the real coordinator steps (scripted investigators) in the dashboard's tenant.

The dashboard tests read what the coordinator really wrote: report, draft, approval, ticket.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import UTC, datetime

import httpx
from fastapi import APIRouter

from ira.coordinator.api import build_router
from ira.core.clock import FrozenClock
from ira.core.ids import new_id
from ira.dashboard.main import role
from ira.runtime.http import create_app
from ira.runtime.platform import Platform
from ira.runtime.store.database import Database
from ira.runtime.store.schema import runs as runs_table
from tests.coordinator.harness import Pump, build
from tests.serving import serve
from tests.triage.builders import alert
from tests.triage.harness import apply, handler

TENANT = "demo"
ADMIN = "dev-admin-token"
VIEWER = "dev-viewer-token"


@dataclass
class Scenario:
    pump: Pump
    run_id: str
    incident_id: str
    routers: list[APIRouter]


async def start_run(platform: Platform, *, held: frozenset[str] = frozenset()) -> Scenario:
    """Triage opens an incident for a fresh alert; the coordinator runs it until it waits for
    approval (or until a step of a ``held`` kind, parked until ``pump.release()``)."""
    now = datetime.now(UTC)
    pump, deps = build(platform.db, clock=FrozenClock(now))
    pump.held.update(held)
    opened = await apply(platform.db, handler(FrozenClock(now)), alert(
        "OrderLatencyHigh", tenant_id=TENANT, service="order-service", fingerprint=new_id("fp"), at=now,
        labels={"service": "order-service", "severity": "critical"}))
    assert opened.incident_id is not None
    await pump.drain()
    return Scenario(pump=pump, run_id=await run_of(platform.db, opened.incident_id), incident_id=opened.incident_id,
                    routers=[*role.routers(platform), build_router(platform.settings, deps)])


async def run_of(db: Database, incident_id: str) -> str:
    async with db.reader() as conn:
        return str((await conn.execute(runs_table.select().where(
            runs_table.c.tenant_id == TENANT, runs_table.c.incident_id == incident_id))).one().run_id)


@asynccontextmanager
async def served(platform: Platform, scenario: Scenario) -> AsyncIterator[tuple[str, httpx.AsyncClient]]:
    """The dashboard and the coordinator's commands on a real uvicorn (SSE needs a real server)."""
    app = create_app(metrics=platform.metrics, routers=scenario.routers)
    async with serve(app) as base, httpx.AsyncClient(base_url=base) as client:
        yield base, client
