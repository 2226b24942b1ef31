"""The dashboard role: pages and the event stream, no background loop."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from importlib.resources import files

from fastapi import APIRouter
from fastapi.staticfiles import StaticFiles

from ira.dashboard.api import build_read_api
from ira.dashboard.pages import build_login, build_pages
from ira.runtime.platform import Platform


class DashboardRole:
    name = "dashboard"

    def routers(self, platform: Platform) -> Sequence[APIRouter]:
        static = APIRouter()
        static.mount("/static", StaticFiles(directory=str(files("ira.dashboard") / "static")), name="static")
        return (build_read_api(platform.settings, platform.db), build_login(platform.settings),
            build_pages(platform), static)

    async def run(self, platform: Platform, stop: asyncio.Event) -> None:
        await stop.wait()


role = DashboardRole()
