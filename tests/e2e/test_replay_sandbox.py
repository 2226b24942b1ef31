"""A replay never reaches production, even where production is real: an ``ira dev`` whose tenant
files tickets in Jira and posts to Slack (their fakes, which record every call), with staging
approvals auto-granted, replays a bundle to completion; the ticket lands in the sandbox (SBX-1,
listed only with ``?environment=staging``), the approval is recorded as ira's own, and neither
Jira nor Slack is asked anything."""

from __future__ import annotations

import re
from pathlib import Path

import httpx
import pytest

from ira.coordinator.gate import AUTO_APPROVER
from tests.e2e.test_record import ADMIN, scenario_bundle, started
from tests.e2e.test_replay import replay
from tests.fakes.jira import FakeJira
from tests.fakes.slack import BOT_TOKEN, SIGNING_SECRET, fake_slack
from tests.serving import serve

pytestmark = pytest.mark.slow


async def test_an_auto_approved_replay_files_a_sandbox_ticket_and_calls_no_production_system(tmp_path: Path) -> None:
    jira = FakeJira()
    async with serve(jira) as jira_url, fake_slack() as slack:
        bundle = scenario_bundle(tmp_path)
        dev = await started(tmp_path, bundle, sections={
            "tickets": jira.settings(jira_url), "coordinator": {"staging_auto_approve": True},
            "slack": {"bot_token": BOT_TOKEN, "signing_secret": SIGNING_SECRET, "api_url": slack.url,
                      "channel": "#incidents"}})
        try:
            code, lines = await replay(dev, bundle)
            async with httpx.AsyncClient(base_url=dev.base_url, headers=ADMIN, timeout=10) as api:
                production = (await api.get("/v1/tickets")).json()["tickets"]
                sandbox = (await api.get("/v1/tickets", params={"environment": "staging"})).json()["tickets"]
                [run] = (await api.get("/v1/runs", params={"environment": "staging"})).json()["runs"]
                detail = (await api.get(f"/v1/runs/{run['run_id']}")).json()
        finally:
            await dev.stop()
        posted = [c for c in slack.calls if c.method.startswith(("chat.", "views."))]

    assert code == 0, lines
    assert re.match(r"PASS: replay rpl_\w+ of SCN-bad-deploy ended completed", lines[-1]), lines[-1]
    assert any(re.match(rf"approvals\s+.*\| create_ticket: approved by {re.escape(AUTO_APPROVER)}$", line)
               for line in lines), lines
    assert any(re.match(r"operations\s+.*\| create_ticket: confirmed_success$", line) for line in lines), lines
    assert [(a["state"], a["decided_by"]) for a in detail["approvals"]] == [("approved", AUTO_APPROVER)]
    assert [(o["fact_state"], o["external_ref"]) for o in detail["operations"]] == [("confirmed_success", "SBX-1")]
    assert production == [] and [(t["key"], t["system"], t["environment"]) for t in sandbox] == [
        ("SBX-1", "sandbox", "staging")]
    assert jira.requests == [] and posted == []  # no production side effect
    assert {d["channel"] for d in detail["deliveries"]} == {"staging-sink"}
