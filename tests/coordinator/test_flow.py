"""A run driven in-process (no broker) on SQLite and PostgreSQL: the store-level walk."""

from __future__ import annotations

from ira.coordinator import records
from ira.core.states import RunState, WaitKind
from ira.runtime.store import runs
from ira.runtime.store.database import Database
from tests.coordinator.harness import api, auth, build, decision, envelope


async def test_decision_to_completed_run_with_one_ticket(db: Database) -> None:
    pump, deps = build(db)
    d = decision()
    await pump.decide(envelope(d))
    await pump.drain()
    async with db.reader() as conn:
        run = (await _runs(conn))[0]
        assert (run.state, run.wait_kind) == (RunState.WAITING, WaitKind.APPROVAL)
        [approval] = await records.list_approvals(conn, "acme", run.run_id)
    async with api(deps) as client:
        answer = await client.post(f"/v1/approvals/{approval.approval_id}/decision", headers=auth("lead"),
                                   json={"decision": "approve", "reason": "looks right"})
        assert answer.status_code == 200, answer.text
        await pump.drain()
        detail = (await client.get(f"/v1/runs/{run.run_id}", headers=auth("viewer"))).json()
        events = (await client.get(f"/v1/runs/{run.run_id}/events", headers=auth("viewer"))).json()["events"]
        tickets = (await client.get("/v1/tickets", headers=auth("viewer"))).json()["tickets"]
    await pump.close()
    assert detail["state"] == "completed" and detail["outcome"] == "ticket_created"
    assert [t["key"] for t in tickets] == ["INC-1"]
    assert detail["operations"][0]["fact_state"] == "confirmed_success"
    assert detail["operations"][0]["external_ref"] == "INC-1"
    assert [e["run_seq"] for e in events] == list(range(1, len(events) + 1))
    kinds = [d.payload["kind"] for d in pump.deliveries]
    assert kinds == ["approval_requested", "approval_decided", "ticket_created", "run_completed"]


async def _runs(conn):  # type: ignore[no-untyped-def]
    from sqlalchemy import select

    from ira.runtime.store.schema import runs as table
    ids = (await conn.execute(select(table.c.run_id))).scalars().all()
    return [await runs.get_run(conn, "acme", i) for i in ids]


async def test_c1_is_idempotent_and_one_incident_has_one_open_run(db: Database) -> None:
    pump, _ = build(db)
    first = decision()
    again = first.model_copy(update={"reason": "re-published"})  # same evaluation, new message id
    second = decision(incident_id=first.incident_id)  # a new evaluation for the same incident
    for d in (first, again, second):
        await pump.decide(envelope(d))
    async with db.reader() as conn:
        [run] = await _runs(conn)
        log = await runs.list_events(conn, "acme", run.run_id)
    await pump.close()
    assert [e.type for e in log] == ["RUN_CREATED", "RUN_STARTED", "DECISION_REFUSED"]
    assert log[0].data["evaluation_id"] == first.evaluation_id
    assert log[2].data == {"evaluation_id": second.evaluation_id, "reason": "the incident already has an open run"}
    assert (run.state, run.incident_id, run.bindings["incident_version"]) == (RunState.RUNNING, first.incident_id, 1)
    assert run.contract["approval_required"] == ["create_ticket"] and "rollback" in run.contract["blocked"]
