"""A real browser (Debian's Chromium, driven by Playwright) on the dashboard: a run changes
state live, the person reads the draft, approves with a reason and sees the ticket appear;
every page is photographed and fits a 390 px wide phone without horizontal scrolling."""

from __future__ import annotations

import shutil
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from ira.core.commit import EventDraft
from ira.core.events import RunEventType
from ira.dashboard.main import role
from ira.runtime.http import create_app
from ira.runtime.platform import Platform
from ira.runtime.store import runs
from tests.contracts.test_store import new_run
from tests.dashboard.scenario import ADMIN, served, start_run
from tests.eventually import eventually
from tests.services import require_service
from tests.serving import serve

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
FLAGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
         "--disable-component-update", "--disable-sync"]
PHONE = {"width": 390, "height": 844}


@pytest_asyncio.fixture(loop_scope="session")
async def browser() -> AsyncIterator[Any]:
    playwright_api = pytest.importorskip("playwright.async_api")
    if not Path(CHROMIUM).exists():
        require_service("chromium", "install Debian's chromium package")
    async with playwright_api.async_playwright() as pw:
        launched = await pw.chromium.launch(executable_path=CHROMIUM, args=FLAGS, headless=True)
        try:
            yield launched
        finally:
            await launched.close()


async def logged_in(browser: Any, base: str, *, viewport: dict[str, int] | None = None) -> Any:
    page = await browser.new_page(viewport=viewport or {"width": 1280, "height": 900})
    await page.goto(f"{base}/login")
    await page.fill("#token", ADMIN)
    await page.click("button[type=submit]")
    await page.wait_for_url(f"{base}/")
    return page


async def test_run_page_follows_new_events_live(browser: Any, platform: Platform, tmp_path: Path) -> None:
    async with platform.db.transaction() as conn:
        run, _ = await runs.create_run(conn, new_run("demo"), at=datetime.now(UTC))
    async with serve(create_app(metrics=platform.metrics, routers=role.routers(platform))) as base:
        page = await logged_in(browser, base)
        await page.goto(f"{base}/runs/{run.run_id}")
        assert await page.locator("#seq-1").count() == 1
        async with platform.db.transaction() as conn:
            await runs.append_events(conn, "demo", run.run_id, [EventDraft(type=RunEventType.BRANCH_FINISHED)],
                                     at=datetime.now(UTC))

        async def shown() -> bool:
            return await page.locator("#seq-2").count() == 1  # type: ignore[no-any-return]

        await eventually(shown, timeout=15, message="the new event appears without a reload")
        assert "Branch ? finished" in await page.locator("#seq-2").inner_text()
        await page.close()  # ends its event stream, so the server can stop


async def test_watch_a_run_read_the_draft_approve_and_see_the_ticket(
    browser: Any, platform: Platform, tmp_path: Path,
) -> None:
    # Given a run whose metrics branch is still at work, open in a browser
    scenario = await start_run(platform, held=frozenset({"metrics"}))
    async with served(platform, scenario) as (base, _):
        page = await logged_in(browser, base)
        await page.goto(f"{base}/runs/{scenario.run_id}")
        marker = await page.evaluate("window.__same_page = 1")  # gone if the page reloads
        assert marker == 1 and await page.locator("#decision").count() == 0
        # When the branch finishes, the plan and the decision appear without a reload
        await scenario.pump.release()

        async def deciding() -> bool:
            return await page.locator("#decision[data-approval]").count() == 1  # type: ignore[no-any-return]

        await eventually(deciding, timeout=20, message="the decision card appears live")
        assert await page.evaluate("window.__same_page") == 1
        assert "waiting" in await page.locator("#run-state").inner_text()
        # Then the draft is readable as it will be filed
        title = await page.locator("#draft .draft-title").inner_text()
        assert "order-service" in title and "Facts" in await page.locator("#draft .draft-body").inner_text()
        await page.screenshot(path=str(tmp_path / "decision.png"), full_page=True)
        # When the person approves with a reason and confirms
        await page.fill("#reason", "p95 jumped with the v3 deploy")
        await page.click("button.approve")
        assert await page.locator("dialog#confirm[open]").count() == 1
        await page.click("#confirm-yes")

        async def recorded() -> bool:
            return "Recorded" in await page.locator("#decision .result").inner_text()

        await eventually(recorded, timeout=10, message="the decision is recorded")
        await scenario.pump.drain()

        async def ticketed() -> bool:
            return await page.locator("#decision a.ticket").count() == 1  # type: ignore[no-any-return]

        # Then the page says who decided and shows INC-n
        await eventually(ticketed, timeout=20, message="the ticket appears on the page")
        assert "Approved by admin" in await page.locator("#decision").inner_text()
        assert (await page.locator("#decision a.ticket").inner_text()).startswith("INC-")
        await page.screenshot(path=str(tmp_path / "decided.png"), full_page=True)
        await page.close()
    await scenario.pump.close()


PAGES = ("/", "/incidents/{incident}", "/needs-a-human", "/runs", "/runs/{run}", "/tickets", "/health")


async def test_every_page_is_photographed_and_fits_a_phone(browser: Any, platform: Platform, tmp_path: Path) -> None:
    scenario = await start_run(platform)
    async with served(platform, scenario) as (base, _):
        for viewport in ({"width": 1280, "height": 900}, PHONE):
            page = await logged_in(browser, base, viewport=viewport)
            for path in PAGES:
                url = base + path.format(incident=scenario.incident_id, run=scenario.run_id)
                response = await page.goto(url)
                assert response.status == 200, url
                name = path.strip("/").split("/")[0] or "incidents"
                shot = tmp_path / f"{name}{'-detail' if '{' in path else ''}-{viewport['width']}.png"
                await page.screenshot(path=str(shot), full_page=True)
                width = await page.evaluate("document.documentElement.scrollWidth")
                assert width <= viewport["width"], f"{path} is {width}px wide at {viewport['width']}px"
            await page.close()
    await scenario.pump.close()
    assert len(list(tmp_path.glob("*.png"))) == 2 * len(PAGES)
