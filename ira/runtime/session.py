"""The dashboard's browser session: a server-side record behind an opaque cookie.

The cookie used to be the API token itself (``ira_token=dev-admin-token``): readable in any
copy of the browser's cookie jar, valid forever, and still valid after ``/logout``. Now
``/login`` checks the token once and sets a random session id; the store keeps its hash, an
expiry and a revocation (``ira.runtime.store.sessions``). The cookie is ``HttpOnly``,
``SameSite=Strict``, and ``Secure`` when the request came over https — directly, or through a
proxy listed in ``http.trusted_proxies`` that says so in ``X-Forwarded-Proto``.

``/login`` and ``/logout`` refuse cross-site posts (:func:`is_cross_site`): SameSite keeps the
cookie off them, but a forged login would still sign the victim into the attacker's session.
"""

from __future__ import annotations

from collections.abc import Collection
from datetime import timedelta
from urllib.parse import urlsplit

from starlette.requests import Request

from ira.core.clock import Clock
from ira.runtime.store.database import Database
from ira.runtime.store.sessions import SessionGrant, live_session, open_session, revoke_session

DEFAULT_SESSION_TTL = timedelta(hours=12)


class Sessions:
    """Open, find and revoke sessions in the store, on the injected clock."""

    def __init__(self, db: Database, *, clock: Clock, ttl: timedelta = DEFAULT_SESSION_TTL) -> None:
        self._db, self._clock, self.ttl = db, clock, ttl

    async def open(self, grant: SessionGrant) -> str:
        async with self._db.transaction() as conn:
            return await open_session(conn, grant, at=self._clock.now(), ttl=self.ttl)

    async def find(self, session_id: str) -> SessionGrant | None:
        async with self._db.reader() as conn:
            return await live_session(conn, session_id, at=self._clock.now())

    async def revoke(self, session_id: str) -> None:
        async with self._db.transaction() as conn:
            await revoke_session(conn, session_id, at=self._clock.now())


def is_https(request: Request, trusted_proxies: Collection[str]) -> bool:
    """The browser reached ira over https: the request itself, or a trusted proxy says so."""
    if request.url.scheme == "https":
        return True
    peer = request.client.host if request.client else None
    forwarded = request.headers.get("x-forwarded-proto", "").split(",")[0].strip().lower()
    return peer in trusted_proxies and forwarded == "https"


def is_cross_site(request: Request) -> bool:
    """A browser post from another site: ``Sec-Fetch-Site``, else ``Origin`` against ``Host``.

    Clients that send neither (curl, scripts) are not browsers and carry no ambient cookie.
    """
    fetch_site = request.headers.get("sec-fetch-site")
    if fetch_site is not None and fetch_site not in ("same-origin", "none"):
        return True
    origin = request.headers.get("origin")
    if origin is None:
        return False
    try:
        netloc = urlsplit(origin).netloc.lower()
    except ValueError:  # not even a URL (an unclosed IPv6 bracket...): not this site
        return True
    return not netloc or netloc != request.headers.get("host", "").lower()
