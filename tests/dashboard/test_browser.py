"""A real browser (Debian's Chromium, driven by Playwright) watches a run live and approves."""

from __future__ import annotations

import shutil
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
import pytest_asyncio

from ira.core.commit import EventDraft
from ira.core.events import RunEventType
from ira.dashboard.main import role
from ira.runtime.http import create_app
from ira.runtime.platform import Platform
from ira.runtime.store import runs
from tests.contracts.test_store import new_run
from tests.eventually import eventually
from tests.services import require_service
from tests.serving import serve

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
FLAGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
         "--disable-component-update", "--disable-sync"]


@pytest_asyncio.fixture(loop_scope="session")
async def browser_page(tmp_path: Path) -> AsyncIterator[object]:
    playwright_api = pytest.importorskip("playwright.async_api")
    if not Path(CHROMIUM).exists():
        require_service("chromium", "install Debian's chromium package")
    async with playwright_api.async_playwright() as pw:
        browser = await pw.chromium.launch(executable_path=CHROMIUM, args=FLAGS, headless=True)
        try:
            yield await browser.new_page()
        finally:
            await browser.close()


async def test_run_page_follows_new_events_live(browser_page: object, platform: Platform, tmp_path: Path) -> None:
    page = browser_page
    async with platform.db.transaction() as conn:
        run, _ = await runs.create_run(conn, new_run("demo"), at=datetime.now(UTC))
    app = create_app(metrics=platform.metrics, routers=role.routers(platform))
    async with serve(app) as base:
        await page.goto(f"{base}/login")  # type: ignore[attr-defined]
        await page.fill("#token", "dev-admin-token")  # type: ignore[attr-defined]
        await page.click("button[type=submit]")  # type: ignore[attr-defined]
        await page.goto(f"{base}/runs/{run.run_id}")  # type: ignore[attr-defined]
        assert await page.locator("#seq-1").count() == 1  # type: ignore[attr-defined]
        async with platform.db.transaction() as conn:
            await runs.append_events(conn, "demo", run.run_id, [EventDraft(type=RunEventType.BRANCH_FINISHED)],
                                     at=datetime.now(UTC))

        async def shown() -> bool:
            return await page.locator("#seq-2").count() == 1  # type: ignore[attr-defined, no-any-return]

        await eventually(shown, timeout=15, message="the new event appears without a reload")
        assert "BRANCH_FINISHED" in await page.locator("#seq-2").inner_text()  # type: ignore[attr-defined]
        await page.screenshot(path=str(tmp_path / "run.png"), full_page=True)  # type: ignore[attr-defined]
