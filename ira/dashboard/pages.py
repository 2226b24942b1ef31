"""HTML pages for the person on call, and the login that gives them a session cookie.

Incident first: every list shows title, service, environment, severity, state, age and the
ticket. The run page is the decision page while a draft waits for approval: the report with
its evidence, the draft as it will be filed, and Approve / Reject.

(No ``from __future__ import annotations``: FastAPI must see the local ``Viewer`` alias.)
"""


from typing import Annotated

from fastapi import APIRouter, Depends, HTTPException, Request
from fastapi.responses import HTMLResponse
from sqlalchemy.ext.asyncio import AsyncConnection

from ira.core.errors import AuthenticationError, NotFoundError, PermissionDeniedError
from ira.core.replay import STAGING
from ira.core.states import IncidentStatus, RunState, WaitKind
from ira.dashboard.templating import render_page
from ira.readmodel import detail, events, incidents, replays, reports, runs, tickets, work
from ira.readmodel.channels import channel_problems
from ira.runtime.auth import SESSION_COOKIE, Principal, authenticate_request, csrf_token
from ira.runtime.platform import Platform
from ira.runtime.readiness import platform_checks, run_checks
from ira.runtime.session import Sessions
from ira.runtime.settings import Settings


def viewer_for(settings: Settings, sessions: Sessions):  # type: ignore[no-untyped-def]
    """A page dependency: the logged-in principal, or a redirect to /login."""

    async def viewer(request: Request) -> Principal:
        try:
            return await authenticate_request(settings, sessions, request)
        except AuthenticationError as exc:
            raise HTTPException(status_code=303, headers={"Location": "/login"}) from exc

    return viewer


def may_decide(viewer: Principal) -> bool:
    try:
        viewer.require("approver")
    except PermissionDeniedError:
        return False
    return True


async def waiting_count(conn: AsyncConnection, tenant_id: str) -> int:
    return len(await work.open_work_items(conn, tenant_id))


def build_pages(platform: Platform, sessions: Sessions) -> APIRouter:
    router = APIRouter(include_in_schema=False)
    Viewer = Annotated[Principal, Depends(viewer_for(platform.settings, sessions))]
    db = platform.db

    @router.get("/")
    async def incidents_page(viewer: Viewer, status: IncidentStatus | None = None) -> HTMLResponse:
        async with db.reader() as conn:
            listed = await incidents.list_incidents(conn, viewer.tenant_id, status=status, limit=200)
            asks = await waiting_count(conn, viewer.tenant_id)
        return render_page("incidents.html", viewer=viewer, incidents=listed, status=status, asks=asks, nav="incidents")

    @router.get("/incidents/{incident_id}")
    async def incident_page(incident_id: str, viewer: Viewer) -> HTMLResponse:
        async with db.reader() as conn:
            found = await incidents.incident_detail(conn, viewer.tenant_id, incident_id)
            asks = await waiting_count(conn, viewer.tenant_id)
        return render_page("incident.html", viewer=viewer, incident=found, asks=asks, nav="incidents")

    @router.get("/runs")
    async def runs_page(viewer: Viewer, state: RunState | None = None, environment: str | None = None) -> HTMLResponse:
        """Production's runs; staging's (replays) with ``?environment=staging``."""
        async with db.reader() as conn:
            listed = await runs.list_runs(conn, viewer.tenant_id, state=state, limit=200,
                                          environment=environment if environment == STAGING else None)
            asks = await waiting_count(conn, viewer.tenant_id)
        return render_page("runs.html", viewer=viewer, runs=listed.runs, state=state, asks=asks, nav="runs")

    @router.get("/needs-a-human")
    async def needs_a_human(viewer: Viewer) -> HTMLResponse:
        async with db.reader() as conn:
            waiting = await runs.list_runs(conn, viewer.tenant_id, state=RunState.WAITING, limit=200)
            items = await work.open_work_items(conn, viewer.tenant_id)
        approvals = [r for r in waiting.runs if r.wait_kind == WaitKind.APPROVAL]
        others = [r for r in waiting.runs if r.wait_kind != WaitKind.APPROVAL]
        return render_page("needs_a_human.html", viewer=viewer, approvals=approvals, others=others, items=items,
                           asks=len(items), nav="needs")

    @router.get("/tickets")
    async def tickets_page(viewer: Viewer, environment: str | None = None) -> HTMLResponse:
        """Production's tickets; the sandbox tickets of replays with ``?environment=staging``."""
        async with db.reader() as conn:
            listed = await tickets.list_tickets(conn, viewer.tenant_id, limit=200,
                                                environment=environment if environment == STAGING else None,
                                                system=platform.settings.tickets_for(viewer.tenant_id).kind)
            asks = await waiting_count(conn, viewer.tenant_id)
        return render_page("tickets.html", viewer=viewer, tickets=listed.tickets, asks=asks, nav="tickets")

    @router.get("/replays")
    async def replays_page(viewer: Viewer) -> HTMLResponse:
        async with db.reader() as conn:
            listed = await replays.list_replays(conn, viewer.tenant_id)
            asks = await waiting_count(conn, viewer.tenant_id)
        return render_page("replays.html", viewer=viewer, replays=listed, asks=asks, nav="replays")

    @router.get("/replays/{replay_id}")
    async def replay_page(replay_id: str, viewer: Viewer) -> HTMLResponse:
        async with db.reader() as conn:
            found = await replays.replay_detail(conn, viewer.tenant_id, replay_id)
            asks = await waiting_count(conn, viewer.tenant_id)
        return render_page("replay.html", viewer=viewer, r=found, asks=asks, nav="replays")

    @router.get("/runs/{run_id}")
    async def run_page(run_id: str, request: Request, viewer: Viewer) -> HTMLResponse:
        async with db.reader() as conn:
            run = await detail.run_detail(conn, viewer.tenant_id, run_id)
            log = await events.list_events(conn, viewer.tenant_id, run_id)
            report = await _or_none(reports.report_view(conn, viewer.tenant_id, run_id))
            draft = await _or_none(reports.draft_view(conn, viewer.tenant_id, run_id))
            asks = await waiting_count(conn, viewer.tenant_id)
        return render_page("run.html", viewer=viewer, run=run, events=log.events, report=report, draft=draft,
                           may_decide=may_decide(viewer), csrf=_csrf(request), asks=asks,
                           nav="runs", trace_link=platform.settings.telemetry.link(run.trace_id))

    @router.get("/health")
    async def health(viewer: Viewer) -> HTMLResponse:
        checks = platform_checks(platform)
        failing = await run_checks(checks)
        metrics = [line for line in platform.metrics.render().decode().splitlines()
                   if line.startswith("ira_") and "_created" not in line]
        async with db.reader() as conn:
            asks = await waiting_count(conn, viewer.tenant_id)
            problems = await channel_problems(conn, viewer.tenant_id, now=platform.clock.now())
        return render_page("health.html", viewer=viewer, failing=failing, checks=sorted(checks), metrics=metrics,
                           asks=asks, nav="health", problems=problems)

    return router


async def _or_none(read):  # type: ignore[no-untyped-def]
    """The view, or None where it does not exist yet (no report before synthesis)."""
    try:
        return await read
    except NotFoundError:
        return None


def _csrf(request: Request) -> str:
    """The page's X-Ira-CSRF value, bound to its session (none for a bearer-token reader)."""
    session_id = request.cookies.get(SESSION_COOKIE)
    return csrf_token(session_id) if session_id else ""
