"""The role matrix (issue #16): no token, viewer, approver, admin × every action route.

The action routes are read from the OpenAPI (every POST under ``/v1`` but the webhook), so a
new command joins the matrix by existing. No token is 401 everywhere, a viewer is 403
everywhere (a viewer's decision on a real waiting approval included), and an approver or an
admin is never refused for a role they hold (an admin-only route, such as starting a replay,
refuses an approver). The run is real: the coordinator's steps drove it to
its approval.
"""

from __future__ import annotations

from typing import Any

import httpx

from ira.runtime.platform import Platform
from tests.dashboard.scenario import Scenario, start_run
from tests.hardening.harness import ADMIN, APPROVER, VIEWER, bearer, served

BODIES: dict[str, dict[str, Any]] = {
    "/v1/approvals/{approval_id}/decision": {"decision": "approve", "reason": "checked the evidence"},
    "/v1/work-items/{work_item_id}/close": {"note": "restarted the pool", "external_ref": None},
    "/v1/runs/{run_id}/cancel": {"reason": "from the role matrix"},
}
"""A valid body per route (the others accept an empty or note-only body)."""


def action_routes(spec: dict[str, Any]) -> dict[str, str | None]:
    """Every POST under /v1 but the webhook, with the role it declares (``x-ira-role``) if any."""
    return {path: item["post"].get("x-ira-role") for path, item in sorted(spec["paths"].items())
            if "post" in item and path.startswith("/v1/") and not path.startswith("/v1/sources/")}


def concrete(path: str, ids: dict[str, str]) -> str:
    for name, value in ids.items():
        path = path.replace(f"{{{name}}}", value)
    return path.replace("{work_item_id}", "wi_not_waiting")


async def post(client: httpx.AsyncClient, route: str, ids: dict[str, str], token: str | None) -> httpx.Response:
    return await client.post(concrete(route, ids), json=BODIES.get(route, {"note": "from the role matrix"}),
                             headers=bearer(token) if token else {})


async def ids_of(client: httpx.AsyncClient, scenario: Scenario) -> dict[str, str]:
    draft = (await client.get(f"/v1/runs/{scenario.run_id}/draft", headers=bearer(ADMIN))).json()
    return {"run_id": scenario.run_id, "approval_id": draft["approval"]["approval_id"]}


async def test_every_action_route_refuses_no_token_and_viewers_and_admits_approvers(platform: Platform) -> None:
    scenario = await start_run(platform)
    async with served(platform) as (_, client):
        routes = action_routes((await client.get("/openapi.json")).json())
        ids = await ids_of(client, scenario)
        refused = {(route, who): (await post(client, route, ids, token)).status_code
                   for route in routes for who, token in (("none", None), ("viewer", VIEWER))}
        decided = await post(client, "/v1/approvals/{approval_id}/decision", ids, APPROVER)
        admitted = {(route, who): (await post(client, route, ids, token)).status_code
                    for route in routes for who, token in (("approver", APPROVER), ("admin", ADMIN))}
    await scenario.pump.close()
    assert {"/v1/runs/{run_id}/cancel", "/v1/approvals/{approval_id}/decision"} <= set(routes)
    assert {k: v for k, v in refused.items() if k[1] == "none"} == {(r, "none"): 401 for r in routes}
    assert {k: v for k, v in refused.items() if k[1] == "viewer"} == {(r, "viewer"): 403 for r in routes}
    assert decided.status_code == 200 and decided.json()["decided_by"] == "oncall"
    admin_only = {r for r, role in routes.items() if role == "admin"}
    assert routes["/v1/replays"] == "admin" and routes["/v1/runs/{run_id}/cancel"] == "approver"
    assert {k: v for k, v in admitted.items() if k[0] in admin_only and k[1] == "approver"} == {
        (r, "approver"): 403 for r in admin_only}
    assert all(status not in (401, 403) and status < 500 for (route, who), status in admitted.items()
               if not (route in admin_only and who == "approver")), admitted


async def test_a_viewers_decision_is_403_and_changes_nothing(platform: Platform) -> None:
    scenario = await start_run(platform)
    async with served(platform) as (_, client):
        ids = await ids_of(client, scenario)
        before = (await client.get(f"/v1/runs/{scenario.run_id}/draft", headers=bearer(VIEWER))).json()
        refused = await post(client, "/v1/approvals/{approval_id}/decision", ids, VIEWER)
        after = (await client.get(f"/v1/runs/{scenario.run_id}/draft", headers=bearer(VIEWER))).json()
    await scenario.pump.close()
    assert (refused.status_code, refused.json()["errors"][0]["code"]) == (403, "role_missing")
    assert after["approval"] == before["approval"] and after["approval"]["decided_by"] is None
