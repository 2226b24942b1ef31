"""The dashboard role: pages and the event stream, no background loop."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from importlib.resources import files

from fastapi import APIRouter
from fastapi.staticfiles import StaticFiles

from ira.dashboard.api import build_read_api
from ira.dashboard.login import build_login
from ira.dashboard.pages import build_pages
from ira.runtime.platform import Platform
from ira.runtime.session import Sessions
from ira.runtime.throttle import LoginThrottle


class DashboardRole:
    name = "dashboard"

    def routers(self, platform: Platform) -> Sequence[APIRouter]:
        static = APIRouter()
        static.mount("/static", StaticFiles(directory=str(files("ira.dashboard") / "static")), name="static")
        settings = platform.settings
        sessions = Sessions(platform.db, clock=platform.clock, ttl=settings.http.session_ttl)
        throttle = LoginThrottle(clock=platform.clock, failures=settings.http.login_failures_per_minute)
        return (build_read_api(settings, platform.db, sessions), build_login(settings, sessions, throttle),
                build_pages(platform, sessions), static)

    async def run(self, platform: Platform, stop: asyncio.Event) -> None:
        await stop.wait()


role = DashboardRole()
