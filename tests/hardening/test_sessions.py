"""Dashboard sessions (issue #16): an opaque server-side session behind an HttpOnly,
SameSite=Strict cookie (Secure behind https), revoked on logout, expiring, refused from
other sites, throttled against guessing; every page carries the security headers."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import httpx
from sqlalchemy import select

from ira.core.clock import FrozenClock
from ira.dashboard.api import build_read_api
from ira.dashboard.login import build_login
from ira.dashboard.pages import build_pages
from ira.runtime.auth import SESSION_COOKIE
from ira.runtime.http import create_app
from ira.runtime.platform import Platform
from ira.runtime.session import Sessions
from ira.runtime.settings import Settings
from ira.runtime.store.schema import sessions as sessions_table
from ira.runtime.throttle import LoginThrottle
from tests.hardening.harness import ADMIN, VIEWER, bearer
from tests.serving import serve

FORM = {"content-type": "application/x-www-form-urlencoded"}
TTL = timedelta(hours=1)


@dataclass
class Dashboard:
    client: httpx.AsyncClient
    clock: FrozenClock


@asynccontextmanager
async def dashboard(platform: Platform, *, trusted: tuple[str, ...] = ()) -> AsyncIterator[Dashboard]:
    """Login, pages and reads on a real uvicorn, on a clock the test moves."""
    settings = Settings.model_validate({**platform.settings.model_dump(mode="python"), "http": {
        **platform.settings.http.model_dump(), "trusted_proxies": trusted}})
    settings = platform.settings.model_copy(update={"http": settings.http})
    clock = FrozenClock(datetime.now(UTC))
    sessions = Sessions(platform.db, clock=clock, ttl=TTL)
    throttle = LoginThrottle(clock=clock, failures=settings.http.login_failures_per_minute)
    routers = [build_read_api(settings, platform.db, sessions), build_login(settings, sessions, throttle),
               build_pages(platform, sessions)]
    async with serve(create_app(metrics=platform.metrics, routers=routers), proxy_headers=False) as base, \
            httpx.AsyncClient(base_url=base) as client:
        yield Dashboard(client, clock)


async def login(client: httpx.AsyncClient, token: str = ADMIN, **headers: str) -> httpx.Response:
    return await client.post("/login", content=f"token={token}", headers={**FORM, **headers})


def set_cookie(response: httpx.Response) -> str:
    return next(v for k, v in response.headers.multi_items() if k == "set-cookie")


async def test_the_cookie_is_an_opaque_httponly_strict_session_not_the_token(platform: Platform) -> None:
    async with dashboard(platform) as d:
        response = await login(d.client)
        cookie = d.client.cookies[SESSION_COOKIE]
        async with platform.db.reader() as conn:
            stored = [row.session_hash for row in (await conn.execute(select(sessions_table))).all()]
    flags = set_cookie(response).lower()
    assert response.status_code == 303 and ADMIN not in set_cookie(response) and len(cookie) >= 40
    assert "httponly" in flags and "samesite=strict" in flags and "max-age=3600" in flags and "secure" not in flags
    assert cookie not in stored  # the store keeps a hash: a database read yields no usable cookie


async def test_the_cookie_is_secure_when_a_trusted_proxy_says_https(platform: Platform) -> None:
    async with dashboard(platform, trusted=("127.0.0.1",)) as d:
        behind_tls = await login(d.client, **{"x-forwarded-proto": "https"})
        plain = await login(d.client)
    assert "secure" in set_cookie(behind_tls).lower() and "secure" not in set_cookie(plain).lower()


async def test_an_untrusted_peer_cannot_claim_https(platform: Platform) -> None:
    async with dashboard(platform, trusted=("10.9.9.9",)) as d:
        response = await login(d.client, **{"x-forwarded-proto": "https"})
    assert "secure" not in set_cookie(response).lower()


async def test_logout_revokes_the_session_server_side(platform: Platform) -> None:
    async with dashboard(platform) as d:
        await login(d.client)
        stolen = d.client.cookies[SESSION_COOKIE]
        assert (await d.client.get("/runs")).status_code == 200
        assert (await d.client.post("/logout")).status_code == 303
        d.client.cookies.set(SESSION_COOKIE, stolen)  # the old value, replayed
        page = await d.client.get("/runs")
        api = await d.client.get("/v1/runs")
    assert page.status_code == 303 and page.headers["location"] == "/login"
    assert api.status_code == 401


async def test_a_session_expires(platform: Platform) -> None:
    async with dashboard(platform) as d:
        await login(d.client, VIEWER)
        assert (await d.client.get("/v1/runs")).status_code == 200
        d.clock.advance(TTL + timedelta(seconds=1))
        assert (await d.client.get("/v1/runs")).status_code == 401


async def test_cross_site_login_and_logout_are_refused(platform: Platform) -> None:
    async with dashboard(platform) as d:
        forged = await login(d.client, **{"origin": "https://evil.example"})
        fetched = await login(d.client, **{"sec-fetch-site": "cross-site"})
        opaque = await login(d.client, **{"origin": "null"})
        assert SESSION_COOKIE not in d.client.cookies
        same_site = await login(d.client, **{"origin": str(d.client.base_url).rstrip("/")})
        kept = d.client.cookies[SESSION_COOKIE]
        logout = await d.client.post("/logout", headers={"origin": "https://evil.example"})
        still = await d.client.get("/v1/runs")
    assert [r.status_code for r in (forged, fetched, opaque)] == [403, 403, 403]
    assert forged.json()["errors"][0]["code"] == "cross_site"
    assert same_site.status_code == 303 and kept
    assert logout.status_code == 403 and still.status_code == 200


async def test_failed_logins_are_throttled_per_client(platform: Platform) -> None:
    async with dashboard(platform) as d:
        failures = [await login(d.client, "wrong-token-guess") for _ in range(10)]
        throttled = await login(d.client)  # even the right token waits
        d.clock.advance(timedelta(minutes=1, seconds=1))
        later = await login(d.client)
    assert all(r.status_code == 303 and "error" in r.headers["location"] for r in failures)
    assert throttled.status_code == 429 and 1 <= int(throttled.headers["retry-after"]) <= 60
    assert throttled.json()["errors"][0]["code"] == "too_many_logins"
    assert later.status_code == 303 and later.headers["location"] == "/"


async def test_pages_carry_the_security_headers(platform: Platform) -> None:
    async with dashboard(platform) as d:
        login_page = await d.client.get("/login")
        await login(d.client)
        runs_page = await d.client.get("/runs")
    for page in (login_page, runs_page):
        assert page.status_code == 200
        csp = page.headers["content-security-policy"]
        assert "script-src 'self'" in csp and "frame-ancestors 'none'" in csp and "unsafe-eval" not in csp
        assert page.headers["x-frame-options"] == "DENY" and page.headers["x-content-type-options"] == "nosniff"
        assert page.headers["referrer-policy"]
    assert "<script>" not in runs_page.text  # no inline script: the CSP would block it


async def test_a_bearer_token_still_works_without_a_session(platform: Platform) -> None:
    async with dashboard(platform) as d:
        response = await d.client.get("/v1/runs", headers=bearer(VIEWER))
    assert response.status_code == 200
