"""``GET /v1/incidents`` and ``GET /v1/incidents/{incident_id}``: tenant-scoped, read-only.

The caller's API token decides the tenant (``principal_for``); no query parameter can name
another one, and another tenant's incident answers 404 exactly like a missing one.
"""

# No ``from __future__ import annotations``: FastAPI must see the local ``Caller`` dependency
# as an object, not as a string it would look up in the module's globals.
from typing import Annotated

from fastapi import APIRouter, Depends, Query

from ira.runtime.auth import Principal, principal_for
from ira.runtime.settings import Settings
from ira.runtime.store.database import Database
from ira.triage import queries
from ira.triage.decide import IncidentStatus


def build_router(settings: Settings, db: Database) -> APIRouter:
    """The incidents API over ``db``, authenticated against ``settings.api_tokens``."""
    router = APIRouter(prefix="/v1/incidents", tags=["incidents"])
    Caller = Annotated[Principal, Depends(principal_for(settings))]

    @router.get("")
    async def list_incidents(
        caller: Caller,
        status: Annotated[IncidentStatus | None, Query(description="open | resolved | closed")] = None,
        limit: Annotated[int, Query(ge=1, le=500)] = 50,
    ) -> dict[str, list[queries.IncidentView]]:
        """The caller's tenant's incidents, newest first."""
        async with db.reader() as conn:
            return {"incidents": await queries.list_incidents(conn, caller.tenant_id, status=status, limit=limit)}

    @router.get("/{incident_id}")
    async def get_incident(caller: Caller, incident_id: str) -> queries.IncidentDetail:
        """One incident with its alerts, evaluations (decision, reason, basis) and runs."""
        async with db.reader() as conn:
            return await queries.incident_detail(conn, caller.tenant_id, incident_id)

    return router
