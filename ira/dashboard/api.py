"""Every GET of the API (DESIGN.md §10), served from the one read model (``ira.readmodel``).

Runs, their events (JSON and SSE), report, draft, incidents, tickets and artifacts. The
caller's API token decides the tenant; another tenant's object answers 404 exactly like a
missing one. Commands (decide, cancel, work-item actions) stay with the coordinator.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Header, Query, Request
from fastapi.responses import Response, StreamingResponse

from ira.core.states import IncidentStatus, RunState, WaitKind
from ira.dashboard.stream import event_stream
from ira.readmodel import detail, events, incidents, reports, runs, tickets
from ira.runtime.auth import Principal, authenticated_router, principal_for
from ira.runtime.bounds import MAX_SEQ, IdPath, IdQuery, SeqCursor, parse_seq
from ira.runtime.session import Sessions
from ira.runtime.settings import Settings
from ira.runtime.store import artifacts
from ira.runtime.store.database import Database


def build_read_api(settings: Settings, db: Database, sessions: Sessions | None = None) -> APIRouter:
    authenticate = principal_for(settings, sessions)
    router = authenticated_router(authenticate, prefix="/v1")
    who = Depends(authenticate)
    _run_reads(router, db, who)
    _decision_reads(router, db, who)
    _incident_reads(router, settings, db, who)
    return router


def _run_reads(router: APIRouter, db: Database, who: Any) -> None:
    @router.get("/runs", tags=["runs"])
    async def list_runs(caller: Principal = who, state: RunState | None = None,
                        wait_kind: WaitKind | None = None, incident_id: IdQuery = None,
                        limit: Annotated[int, Query(ge=1, le=500)] = 50,
                        environment: Annotated[str | None, Query(pattern="^[a-z]{1,32}$")] = None) -> runs.RunList:
        """The tenant's runs, newest first, optionally by state, wait kind and incident. Staging runs
        (replays) are listed only with ``?environment=staging``."""
        async with db.reader() as conn:
            return await runs.list_runs(conn, caller.tenant_id, state=state, wait_kind=wait_kind,
                                        incident_id=incident_id, limit=limit, environment=environment)

    @router.get("/runs/{run_id}", tags=["runs"])
    async def get_run(run_id: IdPath, caller: Principal = who) -> detail.RunDetail:
        """The run with its steps, approvals, operations, budget, deliveries, work items and drafts."""
        async with db.reader() as conn:
            return await detail.run_detail(conn, caller.tenant_id, run_id)

    @router.get("/runs/{run_id}/events", tags=["runs"])
    async def list_events(run_id: IdPath, caller: Principal = who, after: SeqCursor = 0,
                          limit: Annotated[int, Query(ge=1, le=1000)] = 1000) -> events.EventList:
        """The run's log after ``run_seq`` ``after``: numbered 1..N without gaps."""
        async with db.reader() as conn:
            return await events.list_events(conn, caller.tenant_id, run_id, after=after, limit=limit)

    @router.get("/runs/{run_id}/events/stream", tags=["runs"], response_class=StreamingResponse)
    async def stream(run_id: IdPath, request: Request, caller: Principal = who, after: SeqCursor = 0,
                     last_event_id: Annotated[str | None, Header(max_length=64)] = None) -> StreamingResponse:
        """SSE; ``id:`` = run_seq; resumes after ``Last-Event-ID`` (or ``?after=``)."""
        async with db.reader() as conn:
            await runs.get_summary(conn, caller.tenant_id, run_id)  # 404 for another tenant's run
        start = parse_seq(last_event_id, name="Last-Event-ID") if last_event_id else after
        frames = event_stream(db, caller.tenant_id, run_id, after=start, disconnected=request.is_disconnected)
        return StreamingResponse(frames, media_type="text/event-stream",
                                 headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"})


def _decision_reads(router: APIRouter, db: Database, who: Any) -> None:
    @router.get("/runs/{run_id}/report", tags=["runs"])
    async def get_report(run_id: IdPath, caller: Principal = who) -> reports.ReportView:
        """Facts with their evidence, hypotheses, how each branch was judged; 404 before synthesis."""
        async with db.reader() as conn:
            return await reports.report_view(conn, caller.tenant_id, run_id)

    @router.get("/runs/{run_id}/draft", tags=["runs"])
    async def get_draft(run_id: IdPath, caller: Principal = who,
                        version: Annotated[int | None, Query(ge=1, le=MAX_SEQ)] = None) -> reports.DraftView:
        """The ticket draft exactly as it will be filed (current version unless ``version``)."""
        async with db.reader() as conn:
            return await reports.draft_view(conn, caller.tenant_id, run_id, version=version)

    @router.get("/artifacts/{ref}", tags=["runs"], response_class=Response)
    async def get_artifact(ref: IdPath, caller: Principal = who) -> Response:
        """An artifact's bytes with its media type; only the caller's tenant's."""
        async with db.reader() as conn:
            meta, body = await artifacts.get_artifact(conn, caller.tenant_id, ref)
        return Response(body, media_type=meta.media_type, headers={
            "Cache-Control": "private, max-age=31536000, immutable", "X-Content-Type-Options": "nosniff",
            "Content-Disposition": "inline"})


def _incident_reads(router: APIRouter, settings: Settings, db: Database, who: Any) -> None:
    @router.get("/incidents", tags=["incidents"])
    async def list_incidents(caller: Principal = who,
                             status: Annotated[IncidentStatus | None, Query(description="open | resolved | closed")]
                             = None, limit: Annotated[int, Query(ge=1, le=500)] = 50,
                             environment: Annotated[str | None, Query(pattern="^[a-z]{1,32}$")] = None,
                             ) -> dict[str, list[incidents.IncidentView]]:
        """The caller's tenant's incidents, newest first; staging's (replays) only with ``?environment=staging``."""
        async with db.reader() as conn:
            return {"incidents": await incidents.list_incidents(conn, caller.tenant_id, status=status, limit=limit,
                                                                environment=environment)}

    @router.get("/incidents/{incident_id}", tags=["incidents"])
    async def get_incident(incident_id: IdPath, caller: Principal = who) -> incidents.IncidentDetail:
        """One incident with its alerts, evaluations (decision, reason, basis), runs and tickets."""
        async with db.reader() as conn:
            return await incidents.incident_detail(conn, caller.tenant_id, incident_id)

    @router.get("/tickets", tags=["tickets"])
    async def list_tickets(caller: Principal = who, limit: Annotated[int, Query(ge=1, le=500)] = 100,
                           environment: Annotated[str | None, Query(pattern="^[a-z]{1,32}$")] = None,
                           ) -> tickets.TicketList:
        """Tickets of the tenant's ticket system, newest first, each with ``system``, ``key`` and ``url``;
        the sandbox tickets of its replays only with ``?environment=staging``."""
        async with db.reader() as conn:
            return await tickets.list_tickets(conn, caller.tenant_id, limit=limit, environment=environment,
                                              system=settings.tickets_for(caller.tenant_id).kind)
