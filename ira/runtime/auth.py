"""Who is calling the API: a bearer token from the config becomes a tenant-bound Principal.

Every ``/v1/*`` route (except the sources', which use each source's own credentials) takes a
Principal and scopes every query by ``principal.tenant_id``: a token cannot see another
tenant's data because no query it drives can name one.
"""

from __future__ import annotations

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


def bearer_token(request: Request) -> str:
    header = request.headers.get("authorization", "")
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise AuthenticationError("missing bearer token: send `Authorization: Bearer <api token>`")
    return token.strip()


def principal_for(settings: Settings) -> Callable[[Request], Principal]:
    """A FastAPI dependency that authenticates the request against ``settings.api_tokens``."""

    def authenticate(request: Request) -> Principal:
        grant = settings.grant_for_api_token(bearer_token(request))
        if grant is None:
            raise AuthenticationError("unknown API token")
        return Principal(name=grant.principal, tenant_id=grant.tenant or settings.tenant,
                         roles=frozenset(r.value for r in grant.roles))

    return authenticate
