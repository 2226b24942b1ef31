"""The whole walk on the real broker: decision -> branches -> join -> draft -> approval ->
INC-1 -> COMPLETED -> signed webhook notification with its receipt."""

from __future__ import annotations

import json
import time

from ira.coordinator import records
from ira.core.states import RunState, WaitKind
from ira.infra.tansu import EmbeddedKafka
from ira.notifier.webhook import verify_signature
from ira.runtime.store.database import Database
from tests.coordinator.harness import api, auth, decision, envelope, run_for_incident
from tests.coordinator.live import live_stack
from tests.eventually import eventually
from tests.notifier.receiver import webhook_receiver


async def _run_of(db: Database, incident_id: str):  # type: ignore[no-untyped-def]
    return await run_for_incident(db, incident_id)


async def test_the_whole_walk_ends_with_one_ticket_and_a_signed_notification(
    db: Database, kafka: EmbeddedKafka, bus_env: str
) -> None:
    # Given the coordinator, scripted investigators, the notifier and a webhook receiver
    d = decision()
    async with webhook_receiver() as hook, live_stack(db, bootstrap=kafka.bootstrap, environment=bus_env,
                                                      webhook_url=hook.url) as stack:
        # When triage's decision arrives on ira.incidents.v1
        await stack.publish(envelope(d))
        waiting = await eventually(lambda: _waiting(db, d.incident_id), timeout=60, message="waiting for approval")
        async with db.reader() as conn:
            [approval] = await records.list_approvals(conn, "acme", waiting.run_id)
        await eventually(lambda: len(hook.received) >= 1, timeout=30, message="approval request posted")
        # And a person approves the draft through the API
        async with api(stack.deps) as client:
            answer = await client.post(f"/v1/approvals/{approval.approval_id}/decision", headers=auth("lead"),
                                       json={"decision": "approve"})
            assert answer.status_code == 200, answer.text
            await eventually(lambda: _state(db, d.incident_id, RunState.COMPLETED), timeout=60, message="completed")
            await eventually(lambda: len(hook.received) >= 4, timeout=30, message="decision, ticket, completion posted")
            detail = await _settled_detail(client, waiting.run_id)
            events = (await client.get(f"/v1/runs/{waiting.run_id}/events", headers=auth("viewer"))).json()["events"]
            tickets = (await client.get("/v1/tickets", headers=auth("viewer"))).json()["tickets"]

    # Then exactly one ticket, a gapless log, budget per branch, receipts on the deliveries
    assert [t["key"] for t in tickets] == ["INC-1"]
    assert detail["operations"][0]["external_ref"] == "INC-1"
    assert [e["run_seq"] for e in events] == list(range(1, len(events) + 1))
    types = [e["type"] for e in events]
    assert types[:2] == ["RUN_CREATED", "RUN_STARTED"] and types[-1] == "RUN_COMPLETED"
    for branch in ("metrics", "logs", "runbooks"):
        assert detail["budget_slices"][branch]["tool_calls"] == {"limit": 5, "reserved": 0, "settled": 1}
    assert detail["budget"]["tool_calls"] == {"limit": 40, "reserved": 0, "settled": 3}
    assert detail["budget"]["steps"]["reserved"] == 0 and detail["budget"]["steps"]["settled"] >= 5
    assert [d["state"] for d in detail["deliveries"]] == ["accepted"] * 4
    assert all(d["receipts"][0]["detail"]["status"] == 200 for d in detail["deliveries"])
    kinds = [json.loads(r.body)["kind"] for r in hook.received]
    assert sorted(kinds) == ["approval_decided", "approval_requested", "run_completed", "ticket_created"]
    for request in hook.received:
        assert verify_signature("hook-secret", request.headers, request.body, now=time.time())
        body = json.loads(request.body)
        assert body["notification_id"] and body["run_version"] >= 1 and body["run_id"] == waiting.run_id


async def _waiting(db: Database, incident_id: str):  # type: ignore[no-untyped-def]
    run = await _run_of(db, incident_id)
    return run if run and (run.state, run.wait_kind) == (RunState.WAITING, WaitKind.APPROVAL) else None


async def _state(db: Database, incident_id: str, state: RunState) -> bool:
    run = await _run_of(db, incident_id)
    return run is not None and run.state == state


async def _settled_detail(client, run_id: str) -> dict:  # type: ignore[no-untyped-def]
    async def check() -> dict | None:
        detail = (await client.get(f"/v1/runs/{run_id}", headers=auth("viewer"))).json()
        return detail if all(d["state"] != "pending" for d in detail["deliveries"]) else None
    return await eventually(check, timeout=30, message="deliveries settled")
