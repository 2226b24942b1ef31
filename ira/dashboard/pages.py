"""HTML pages and the login that gives them a session cookie.

(No ``from __future__ import annotations``: FastAPI must see the local ``Viewer`` alias.)
"""


from importlib.resources import files
from typing import Annotated, Any
from urllib.parse import parse_qs

from fastapi import APIRouter, Depends, HTTPException, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from jinja2 import Environment, FileSystemLoader, select_autoescape

from ira.core.errors import AuthenticationError
from ira.readmodel import detail, events, runs, work
from ira.runtime.auth import SESSION_COOKIE, Principal, authenticate_token, csrf_token, request_token
from ira.runtime.platform import Platform
from ira.runtime.readiness import platform_checks, run_checks
from ira.runtime.settings import Settings

TEMPLATES = Environment(loader=FileSystemLoader(str(files("ira.dashboard") / "templates")),
                        autoescape=select_autoescape(["html"]))


def render(name: str, **context: Any) -> HTMLResponse:
    return HTMLResponse(TEMPLATES.get_template(name).render(**context))


def viewer_for(settings: Settings):  # type: ignore[no-untyped-def]
    """A page dependency: the logged-in principal, or a redirect to /login."""

    def viewer(request: Request) -> Principal:
        try:
            return authenticate_token(settings, request_token(request))
        except AuthenticationError as exc:
            raise HTTPException(status_code=303, headers={"Location": "/login"}) from exc

    return viewer


def build_login(settings: Settings) -> APIRouter:
    router = APIRouter(include_in_schema=False)

    @router.get("/login")
    async def login_form(error: str | None = None) -> HTMLResponse:
        return render("login.html", error=error)

    @router.post("/login")
    async def login(request: Request) -> Response:
        token = parse_qs((await request.body()).decode()).get("token", [""])[0].strip()
        try:
            authenticate_token(settings, token)
        except AuthenticationError:
            return RedirectResponse("/login?error=unknown+token", status_code=303)
        response = RedirectResponse("/", status_code=303)
        response.set_cookie(SESSION_COOKIE, token, httponly=True, samesite="strict", path="/")
        return response

    @router.post("/logout")
    async def logout() -> Response:
        response = RedirectResponse("/login", status_code=303)
        response.delete_cookie(SESSION_COOKIE, path="/")
        return response

    return router


def build_pages(platform: Platform) -> APIRouter:
    router = APIRouter(include_in_schema=False)
    Viewer = Annotated[Principal, Depends(viewer_for(platform.settings))]

    @router.get("/")
    async def runs_page(viewer: Viewer, state: str | None = None) -> HTMLResponse:
        async with platform.db.reader() as conn:
            listed = await runs.list_runs(conn, viewer.tenant_id, state=state, limit=100)
        return render("runs.html", viewer=viewer, runs=listed.runs, state=state)

    @router.get("/needs-a-human")
    async def needs_a_human(viewer: Viewer) -> HTMLResponse:
        async with platform.db.reader() as conn:
            waiting = await runs.list_runs(conn, viewer.tenant_id, state="waiting", limit=100)
            items = await work.open_work_items(conn, viewer.tenant_id)
        return render("needs_a_human.html", viewer=viewer, runs=waiting.runs, items=items)

    @router.get("/runs/{run_id}")
    async def run_page(run_id: str, request: Request, viewer: Viewer) -> HTMLResponse:
        async with platform.db.reader() as conn:
            run = await detail.run_detail(conn, viewer.tenant_id, run_id)
            log = await events.list_events(conn, viewer.tenant_id, run_id)
        return render("run.html", viewer=viewer, run=run, events=log.events, csrf=csrf_token(request_token(request)))

    @router.get("/health")
    async def health(viewer: Viewer) -> HTMLResponse:
        checks = platform_checks(platform)
        failing = await run_checks(checks)
        metrics = [line for line in platform.metrics.render().decode().splitlines()
                   if line.startswith("ira_") and "_created" not in line]
        return render("health.html", viewer=viewer, failing=failing, checks=sorted(checks), metrics=metrics)

    return router
