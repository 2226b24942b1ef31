"""Who is calling the API: a bearer token from the config, or a dashboard session opened with
one, becomes a tenant-bound Principal.

Every ``/v1/*`` route (except the sources', which use each source's own credentials) takes a
Principal and scopes every query by ``principal.tenant_id``: a token cannot see another
tenant's data because no query it drives can name one.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

from fastapi import APIRouter, Request, Response
from fastapi.routing import APIRoute

from ira.core.errors import AuthenticationError, PermissionDeniedError
from ira.core.model import Model
from ira.runtime.session import Sessions
from ira.runtime.settings import Settings
from ira.runtime.settings.model import ApiToken
from ira.runtime.store.sessions import SessionGrant, digest


class Principal(Model):
    """An authenticated caller."""

    name: str
    tenant_id: str
    roles: frozenset[str]

    def require(self, role: str) -> None:
        """PermissionDeniedError unless the principal has ``role`` (admin has every role)."""
        if role not in self.roles and "admin" not in self.roles:
            raise PermissionDeniedError(f"{self.name} lacks the {role} role")


SESSION_COOKIE = "ira_session"
"""The dashboard's HttpOnly cookie: an opaque session id (``ira.runtime.session``), never a token."""
CSRF_HEADER = "x-ira-csrf"
_SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})


def csrf_token(session_id: str) -> str:
    """What a page must echo in ``X-Ira-CSRF`` to change state with its cookie.

    A cross-site form can make the browser send the cookie but cannot read the page that
    carries this value, so it cannot forge the header (double-submit, bound to the session).
    """
    return hmac.new(session_id.encode("utf-8", "surrogateescape"), b"ira-csrf", hashlib.sha256).hexdigest()


def is_csrf_valid(sent: str, session_id: str) -> bool:
    """Constant-time, on bytes: ``hmac.compare_digest`` refuses non-ASCII *strings* (a 500)."""
    expected = csrf_token(session_id).encode()
    return hmac.compare_digest(sent.encode("utf-8", "surrogateescape"), expected)


def bearer_token(request: Request) -> str | None:
    scheme, _, token = request.headers.get("authorization", "").partition(" ")
    return token.strip() if scheme.lower() == "bearer" and token.strip() else None


def session_cookie(request: Request) -> str:
    """The session id of a cookie-authenticated request; a change of state needs the CSRF header."""
    cookie = request.cookies.get(SESSION_COOKIE)
    if not cookie:
        raise AuthenticationError("missing bearer token: send `Authorization: Bearer <api token>`")
    if request.method not in _SAFE_METHODS and not is_csrf_valid(request.headers.get(CSRF_HEADER, ""), cookie):
        raise PermissionDeniedError("a cookie-authenticated change needs the X-Ira-CSRF header")
    return cookie


def authenticate_token(settings: Settings, token: str) -> Principal:
    grant = settings.grant_for_api_token(token)
    if grant is None:
        raise AuthenticationError("unknown API token")
    return _principal(settings, grant)


def session_grant(settings: Settings, token: str) -> SessionGrant:
    """What a session opened with ``token`` stands for; AuthenticationError for an unknown token."""
    principal = authenticate_token(settings, token)
    return SessionGrant(tenant_id=principal.tenant_id, principal=principal.name, token_digest=digest(token))


async def authenticate_request(settings: Settings, sessions: Sessions | None, request: Request) -> Principal:
    """The bearer token if one is sent, else the dashboard session (when ``sessions`` is given)."""
    token = bearer_token(request)
    if token is not None:
        return authenticate_token(settings, token)
    if sessions is None:
        raise AuthenticationError("missing bearer token: send `Authorization: Bearer <api token>`")
    found = await sessions.find(session_cookie(request))
    grant = _grant_for_digest(settings, found.token_digest) if found else None
    if grant is None:
        raise AuthenticationError("no session: log in again")
    return _principal(settings, grant)


def _grant_for_digest(settings: Settings, token_digest: str) -> ApiToken | None:
    """The configured token with this digest, compared in constant time like the tokens."""
    found = None
    for entry in settings.api_tokens:
        if hmac.compare_digest(digest(entry.token.get_secret_value()), token_digest):
            found = entry
    return found


def _principal(settings: Settings, grant: ApiToken) -> Principal:
    return Principal(name=grant.principal, tenant_id=grant.tenant or settings.tenant,
                     roles=frozenset(r.value for r in grant.roles))


Authenticate = Callable[[Request], Awaitable[Principal]]


def principal_for(settings: Settings, sessions: Sessions | None = None) -> Authenticate:
    """A FastAPI dependency: the bearer token (``settings.api_tokens``), else the session cookie.

    The principal is kept on the request, so the :func:`authenticated_router` check that ran
    before the body was read and the route's own dependency authenticate once.
    """

    async def authenticate(request: Request) -> Principal:
        found = getattr(request.state, "principal", None)
        if not isinstance(found, Principal):
            found = await authenticate_request(settings, sessions, request)
            request.state.principal = found
        return found

    return authenticate


ROLE = "x-ira-role"
"""The OpenAPI extension key of the role a route requires before its body is read."""


def requires(role: str) -> dict[str, Any]:
    """``openapi_extra`` for a route of an :func:`authenticated_router` that only ``role`` may call:
    everyone else is answered 403 before the body is read (and the OpenAPI says so)."""
    return {ROLE: role}


def authenticated_router(authenticate: Authenticate, **options: Any) -> APIRouter:
    """An APIRouter whose routes authenticate the caller *before* FastAPI reads the body.

    FastAPI reads and parses a route's body before it solves the route's dependencies, so a
    bearer dependency alone lets anyone make the process read a body (up to the route's
    limit) and parse it before the 401. Here the route handler itself starts with the check,
    and with the route's :func:`requires` role if it states one.
    """

    class AuthenticatedRoute(APIRoute):
        def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
            handler = super().get_route_handler()
            role = (self.openapi_extra or {}).get(ROLE)

            async def authenticated(request: Request) -> Response:
                principal = await authenticate(request)
                if role is not None:
                    principal.require(role)
                return await handler(request)

            return authenticated

    return APIRouter(route_class=AuthenticatedRoute, **options)
