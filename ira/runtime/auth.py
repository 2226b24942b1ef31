"""Who is calling the API: a bearer token from the config becomes a tenant-bound Principal.

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
from ira.runtime.settings import Settings


class Principal(Model):
    """An authenticated caller."""

    name: str
    tenant_id: str
    roles: frozenset[str]

    def require(self, role: str) -> None:
        """PermissionDeniedError unless the principal has ``role`` (admin has every role)."""
        if role not in self.roles and "admin" not in self.roles:
            raise PermissionDeniedError(f"{self.name} lacks the {role} role")


SESSION_COOKIE = "ira_token"
"""The dashboard keeps the API token in this HttpOnly cookie after ``/login``."""
CSRF_HEADER = "x-ira-csrf"
_SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})


def csrf_token(api_token: str) -> str:
    """What a page must echo in ``X-Ira-CSRF`` to change state with its cookie.

    A cross-site form can make the browser send the cookie but cannot read the page that
    carries this value, so it cannot forge the header (double-submit, bound to the token).
    """
    return hmac.new(api_token.encode(), b"ira-csrf", hashlib.sha256).hexdigest()


def is_csrf_valid(sent: str, session: str) -> bool:
    """Constant-time, on bytes: ``hmac.compare_digest`` refuses non-ASCII *strings* (a 500)."""
    expected = csrf_token(session).encode()
    return hmac.compare_digest(sent.encode("utf-8", "surrogateescape"), expected)


def request_token(request: Request) -> str:
    """The API token of a request: the bearer header, else the dashboard's session cookie."""
    scheme, _, token = request.headers.get("authorization", "").partition(" ")
    if scheme.lower() == "bearer" and token.strip():
        return token.strip()
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
    return Principal(name=grant.principal, tenant_id=grant.tenant or settings.tenant,
                     roles=frozenset(r.value for r in grant.roles))


Authenticate = Callable[[Request], Awaitable[Principal]]


def principal_for(settings: Settings) -> Authenticate:
    """A FastAPI dependency that authenticates the request against ``settings.api_tokens``.

    The principal is kept on the request, so the :func:`authenticated_router` check that ran
    before the body was read and the route's own dependency authenticate once.
    """

    async def authenticate(request: Request) -> Principal:
        found = getattr(request.state, "principal", None)
        if not isinstance(found, Principal):
            found = authenticate_token(settings, request_token(request))
            request.state.principal = found
        return found

    return authenticate


def authenticated_router(authenticate: Authenticate, **options: Any) -> APIRouter:
    """An APIRouter whose routes authenticate the caller *before* FastAPI reads the body.

    FastAPI reads and parses a route's body before it solves the route's dependencies, so a
    bearer dependency alone lets anyone make the process read a body (up to the route's
    limit) and parse it before the 401. Here the route handler itself starts with the check.
    """

    class AuthenticatedRoute(APIRoute):
        def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
            handler = super().get_route_handler()

            async def authenticated(request: Request) -> Response:
                await authenticate(request)
                return await handler(request)

            return authenticated

    return APIRouter(route_class=AuthenticatedRoute, **options)
