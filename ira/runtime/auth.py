"""Who is calling the API: a bearer token from the config becomes a tenant-bound Principal.

Every ``/v1/*`` route (except the sources', which use each source's own credentials) takes a
Principal and scopes every query by ``principal.tenant_id``: a token cannot see another
tenant's data because no query it drives can name one.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Callable

from fastapi import Request

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


def request_token(request: Request) -> str:
    """The API token of a request: the bearer header, else the dashboard's session cookie."""
    scheme, _, token = request.headers.get("authorization", "").partition(" ")
    if scheme.lower() == "bearer" and token.strip():
        return token.strip()
    cookie = request.cookies.get(SESSION_COOKIE)
    if not cookie:
        raise AuthenticationError("missing bearer token: send `Authorization: Bearer <api token>`")
    if request.method not in _SAFE_METHODS:
        sent = request.headers.get(CSRF_HEADER, "")
        if not hmac.compare_digest(sent, csrf_token(cookie)):
            raise PermissionDeniedError("a cookie-authenticated change needs the X-Ira-CSRF header")
    return cookie


def authenticate_token(settings: Settings, token: str) -> Principal:
    grant = settings.grant_for_api_token(token)
    if grant is None:
        raise AuthenticationError("unknown API token")
    return Principal(name=grant.principal, tenant_id=grant.tenant or settings.tenant,
                     roles=frozenset(r.value for r in grant.roles))


def principal_for(settings: Settings) -> Callable[[Request], Principal]:
    """A FastAPI dependency that authenticates the request against ``settings.api_tokens``."""

    def authenticate(request: Request) -> Principal:
        return authenticate_token(settings, request_token(request))

    return authenticate
