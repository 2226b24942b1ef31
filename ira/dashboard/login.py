"""``/login`` and ``/logout``: a token typed once becomes a server-side session.

The token is checked, never stored in the browser: the cookie carries an opaque session id
(``ira.runtime.session``). Both routes refuse cross-site posts (403), and failed logins are
throttled per client (429 + Retry-After), so a token cannot be guessed at speed.
"""

from __future__ import annotations

import math
from urllib.parse import parse_qs

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from ira.core.errors import AuthenticationError, InvalidMessageError
from ira.dashboard.templating import render_page
from ira.runtime.auth import SESSION_COOKIE, session_grant
from ira.runtime.body import body_limit
from ira.runtime.http import error_response
from ira.runtime.session import Sessions, is_cross_site, is_https
from ira.runtime.settings import Settings
from ira.runtime.throttle import LoginThrottle

LOGIN_BODY_LIMIT = 4096
"""A login form is one token; anything longer is not a login."""


class InvalidFormError(InvalidMessageError):
    """A form body that is not UTF-8 ``application/x-www-form-urlencoded`` (422)."""

    code = "invalid_form"


def form_field(body: bytes, name: str) -> str:
    """One field of an urlencoded form, strictly UTF-8 (raw and percent-decoded); "" when absent."""
    try:
        fields = parse_qs(body.decode("utf-8"), max_num_fields=8, errors="strict")
    except (UnicodeDecodeError, ValueError) as exc:
        raise InvalidFormError("the form must be UTF-8 application/x-www-form-urlencoded") from exc
    return fields.get(name, [""])[0].strip()


def client_key(request: Request, trusted_proxies: frozenset[str]) -> str:
    """Who the throttle counts: the peer, or behind a trusted proxy the address it forwards."""
    peer = request.client.host if request.client else "unknown"
    forwarded = request.headers.get("x-forwarded-for", "").split(",")[-1].strip()
    return forwarded[:64] if peer in trusted_proxies and forwarded else peer


def build_login(settings: Settings, sessions: Sessions, throttle: LoginThrottle) -> APIRouter:
    router = APIRouter(include_in_schema=False)
    trusted = frozenset(settings.http.trusted_proxies)

    @router.get("/login")
    async def login_form(error: str | None = None) -> HTMLResponse:
        return render_page("login.html", error="unknown token" if error else None)

    @router.post("/login", openapi_extra=body_limit(LOGIN_BODY_LIMIT))
    async def login(request: Request) -> Response:
        refused = _refuse_cross_site(request) or _throttled(throttle, client_key(request, trusted))
        if refused is not None:
            return refused
        try:
            grant = session_grant(settings, form_field(await request.body(), "token"))
        except AuthenticationError:
            throttle.failed(client_key(request, trusted))
            return RedirectResponse("/login?error=unknown+token", status_code=303)
        response = RedirectResponse("/", status_code=303)
        response.set_cookie(SESSION_COOKIE, await sessions.open(grant), max_age=int(sessions.ttl.total_seconds()),
                            path="/", httponly=True, samesite="strict", secure=is_https(request, trusted))
        return response

    @router.post("/logout")
    async def logout(request: Request) -> Response:
        refused = _refuse_cross_site(request)
        if refused is not None:
            return refused
        session_id = request.cookies.get(SESSION_COOKIE)
        if session_id:
            await sessions.revoke(session_id)
        response = RedirectResponse("/login", status_code=303)
        response.delete_cookie(SESSION_COOKIE, path="/", httponly=True, samesite="strict",
                               secure=is_https(request, trusted))
        return response

    return router


def _refuse_cross_site(request: Request) -> Response | None:
    if is_cross_site(request):
        return error_response(403, "cross_site", "a login or logout must come from this site's own pages")
    return None


def _throttled(throttle: LoginThrottle, client: str) -> Response | None:
    wait = throttle.retry_after(client)
    if wait is None:
        return None
    seconds = str(max(1, math.ceil(wait.total_seconds())))
    return error_response(429, "too_many_logins", "too many failed logins; try again later",
                          headers={"Retry-After": seconds})
