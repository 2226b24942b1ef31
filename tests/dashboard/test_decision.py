"""The decision page: the report with its evidence, the draft as it will be filed, a decision
with a reason, and afterwards who decided and the ticket. Real coordinator steps, real SQL."""

from __future__ import annotations

import html
import json

from ira.dashboard.render import markdown
from ira.runtime.platform import Platform
from tests.dashboard.scenario import ADMIN, VIEWER, served, start_run
from tests.dashboard.test_pages import login


def bearer(token: str) -> dict[str, str]:
    return {"authorization": f"Bearer {token}"}


async def test_decision_page_shows_report_evidence_and_the_draft_as_filed(platform: Platform) -> None:
    scenario = await start_run(platform)
    async with served(platform, scenario) as (_, client):
        draft = (await client.get(f"/v1/runs/{scenario.run_id}/draft", headers=bearer(ADMIN))).json()
        report = (await client.get(f"/v1/runs/{scenario.run_id}/report", headers=bearer(ADMIN))).json()
        await login(client)
        page = (await client.get(f"/runs/{scenario.run_id}")).text
    await scenario.pump.close()
    assert "Approve this ticket?" in page and f'data-approval="{draft["approval"]["approval_id"]}"' in page
    assert f'data-countdown="{draft["approval"]["expires_at"].replace("Z", "+00:00")}"' in page
    assert html.escape(draft["title"], quote=False) in page
    assert str(markdown(draft["body"])) in page  # the body exactly as filed, rendered
    for fact in report["facts"]:
        assert f'id="fact-{fact["label"]}"' in page
    for h in report["hypotheses"]:
        assert html.escape(h["statement"], quote=False) in page and f'{round(h["confidence"] * 100)}%' in page
    assert 'class="approve"' in page and "<dialog" in page


async def test_markdown_is_rendered_and_html_in_it_is_escaped() -> None:
    rendered = str(markdown("## Facts\n- **M1** <script>alert(1)</script> [x](javascript:alert(2))"))
    assert "<h2>Facts</h2>" in rendered and "<strong>M1</strong>" in rendered
    assert "<script>" not in rendered and "&lt;script&gt;" in rendered
    assert 'href="javascript:' not in rendered


async def test_a_viewer_reads_the_draft_but_may_not_decide(platform: Platform) -> None:
    scenario = await start_run(platform)
    async with served(platform, scenario) as (_, client):
        draft = (await client.get(f"/v1/runs/{scenario.run_id}/draft", headers=bearer(VIEWER))).json()
        refused = await client.post(f"/v1/approvals/{draft['approval']['approval_id']}/decision",
                                    headers=bearer(VIEWER), json={"decision": "approve", "reason": "lgtm"})
        cancel = await client.post(f"/v1/runs/{scenario.run_id}/cancel", headers=bearer(VIEWER))
        await login(client, VIEWER)
        page = (await client.get(f"/runs/{scenario.run_id}")).text
    await scenario.pump.close()
    assert (refused.status_code, refused.json()["errors"][0]["code"]) == (403, "role_missing")
    assert cancel.status_code == 403
    assert html.escape(draft["title"], quote=False) in page
    assert 'class="approve"' not in page and "may read this draft but not decide it" in page


async def test_after_the_decision_the_page_shows_who_decided_why_and_the_ticket(platform: Platform) -> None:
    scenario = await start_run(platform)
    async with served(platform, scenario) as (_, client):
        draft = (await client.get(f"/v1/runs/{scenario.run_id}/draft", headers=bearer(ADMIN))).json()
        decided = await client.post(f"/v1/approvals/{draft['approval']['approval_id']}/decision",
                                    headers=bearer(ADMIN), json={"decision": "approve", "reason": "v3 deploy, clear"})
        await scenario.pump.drain()
        await login(client)
        page = (await client.get(f"/runs/{scenario.run_id}")).text
        tickets = (await client.get("/tickets")).text
    await scenario.pump.close()
    assert decided.status_code == 200
    assert "Approved by admin" in page and "“v3 deploy, clear”" in page
    assert 'href="/tickets#INC-1"' in page and 'class="approve"' not in page
    assert 'id="INC-1"' in tickets and html.escape(draft["title"], quote=False) in tickets


async def test_run_page_api_and_stream_show_the_same_events(platform: Platform) -> None:
    scenario = await start_run(platform)
    async with served(platform, scenario) as (_, client):
        listed = (await client.get(f"/v1/runs/{scenario.run_id}/events", headers=bearer(ADMIN))).json()["events"]
        detail = (await client.get(f"/v1/runs/{scenario.run_id}", headers=bearer(ADMIN))).json()
        streamed = []
        async with client.stream("GET", f"/v1/runs/{scenario.run_id}/events/stream", headers=bearer(ADMIN)) as sse:
            async for line in sse.aiter_lines():
                if line.startswith("data: "):
                    streamed.append(json.loads(line[6:]))
                    if streamed[-1]["run_seq"] == listed[-1]["run_seq"]:
                        break
        await login(client)
        page = (await client.get(f"/runs/{scenario.run_id}")).text
    await scenario.pump.close()
    assert streamed == listed and listed[-1]["run_seq"] == detail["last_seq"]
    for event in listed:
        assert f'id="seq-{event["run_seq"]}"' in page and html.escape(event["text"], quote=False) in page
    assert f'<span class="pill {detail["state"]}">{detail["state"]} · {detail["wait_kind"]}</span>' in page


async def test_incident_pages_show_alerts_decisions_runs_and_tickets(platform: Platform) -> None:
    scenario = await start_run(platform)
    async with served(platform, scenario) as (_, client):
        await login(client)
        listed = (await client.get("/")).text
        detail = (await client.get(f"/incidents/{scenario.incident_id}")).text
        needs = (await client.get("/needs-a-human")).text
        runs = (await client.get("/runs")).text
    await scenario.pump.close()
    assert f'href="/incidents/{scenario.incident_id}"' in listed and "waiting for a person" in listed
    assert "OrderLatencyHigh" in detail and "service=order-service" in detail
    assert "started a run" in detail and "new incident" in detail and f'href="/runs/{scenario.run_id}"' in detail
    assert f'href="/runs/{scenario.run_id}"' in needs and "Review the draft" in needs
    assert f'href="/runs/{scenario.run_id}"' in runs and "order-service" in runs
