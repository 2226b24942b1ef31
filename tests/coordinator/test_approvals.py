"""Approvals through the API: one decision per approval, bound to draft, version, role, expiry."""

from __future__ import annotations

import asyncio
from datetime import timedelta

from ira.connectors.tickets.builtin import BuiltinTicketSystem
from ira.coordinator import operations, records
from ira.coordinator.control import edit_draft
from ira.coordinator.intake import open_run_for
from ira.core.alert import DecisionKind
from ira.core.clock import FrozenClock
from ira.core.operation import Approval
from ira.core.states import ApprovalState, RunState, StepState, WaitKind
from ira.runtime.scanner import Scanner
from ira.runtime.store import runs, steps
from ira.runtime.store.database import Database
from tests.coordinator.harness import T0, api, auth, build, decision, envelope, incident_update


async def waiting_for_approval(db: Database, **kw: object):  # type: ignore[no-untyped-def]
    clock = FrozenClock(T0)
    pump, deps = build(db, clock=clock, **kw)  # type: ignore[arg-type]
    d = decision()
    await pump.decide(envelope(d))
    await pump.drain()
    async with db.reader() as conn:
        run = await open_run_for(conn, "acme", d.incident_id)
        assert run is not None and (run.state, run.wait_kind) == (RunState.WAITING, WaitKind.APPROVAL)
        [approval] = await records.list_approvals(conn, "acme", run.run_id)
    return pump, deps, clock, d, run.run_id, approval


async def events_of(db: Database, run_id: str, kind: str) -> list[dict]:
    async with db.reader() as conn:
        return [e.data for e in await runs.list_events(conn, "acme", run_id) if e.type == kind]


async def approval_of(db: Database, approval_id: str) -> Approval:
    async with db.reader() as conn:
        return await records.get_approval(conn, "acme", approval_id)


def decide(client, approval_id: str, who: str = "lead", choice: str = "approve"):  # type: ignore[no-untyped-def]
    return client.post(f"/v1/approvals/{approval_id}/decision", headers=auth(who), json={"decision": choice})


async def test_duplicate_and_concurrent_clicks_make_one_decision(db: Database) -> None:
    pump, deps, _, _, run_id, approval = await waiting_for_approval(db)
    async with api(deps) as client:
        answers = await asyncio.gather(*(decide(client, approval.approval_id) for _ in range(5)))
        late = await decide(client, approval.approval_id, who="admin")
    await pump.drain()
    await pump.close()
    assert [a.status_code for a in answers] == [200] * 5
    assert sorted(a.json()["duplicate"] for a in answers) == [False, True, True, True, True]
    assert (late.status_code, late.json()["errors"][0]["code"]) == (409, "already_decided")
    assert len(await events_of(db, run_id, "APPROVAL_APPROVED")) == 1
    assert [e["code"] for e in await events_of(db, run_id, "APPROVAL_DECISION_REFUSED")] == ["already_decided"]
    async with db.reader() as conn:
        assert (await runs.get_run(conn, "acme", run_id)).state == RunState.COMPLETED


async def test_after_expiry_the_decision_is_refused_and_the_timer_ends_the_run(db: Database) -> None:
    pump, deps, clock, _, run_id, approval = await waiting_for_approval(db)
    clock.advance(deps.config.approval_expiry + timedelta(seconds=1))
    async with api(deps) as client:
        answer = await decide(client, approval.approval_id)
        assert (answer.status_code, answer.json()["errors"][0]["code"]) == (409, "expired")
        await Scanner(db=db, clock=clock, environment="prod").scan_once()  # the durable expiry timer is due
        await pump.drain()
        detail = (await client.get(f"/v1/runs/{run_id}", headers=auth("viewer"))).json()
        tickets = (await client.get("/v1/tickets", headers=auth("viewer"))).json()["tickets"]
    await pump.close()
    assert (detail["state"], detail["outcome"]) == ("failed", "approval_expired")
    assert detail["approvals"][0]["state"] == "expired" and tickets == []
    assert [w["state"] for w in detail["work_items"]] == ["closed"]
    assert [e["code"] for e in await events_of(db, run_id, "APPROVAL_DECISION_REFUSED")] == ["expired"]


async def test_a_human_edit_needs_a_new_approval(db: Database) -> None:
    pump, deps, clock, _, run_id, old = await waiting_for_approval(db)
    async with db.transaction() as conn:
        new = await edit_draft(conn, "acme", run_id, title="order-service: checkout latency", body=None,
                               principal="lead", config=deps.config, at=clock.now())
    async with api(deps) as client:
        refused = await decide(client, old.approval_id)
        accepted = await decide(client, new.approval_id)
        await pump.drain()
        tickets = (await client.get("/v1/tickets", headers=auth("viewer"))).json()["tickets"]
    await pump.close()
    assert (refused.status_code, refused.json()["errors"][0]["code"]) == (409, "draft_changed")
    assert accepted.status_code == 200 and new.payload_hash != old.payload_hash
    assert (await approval_of(db, old.approval_id)).state == ApprovalState.INVALIDATED
    assert [t["title"] for t in tickets] == ["order-service: checkout latency"]


async def test_an_older_triages_deliver_of_a_known_alert_leaves_the_pending_approval_standing(db: Database) -> None:
    # Given a run waiting for approval, When a deliver decision of an older triage (one alert,
    # the same alert firing again) arrives on the updates topic
    pump, deps, _, d, run_id, old = await waiting_for_approval(db)
    follow_up = decision(incident_id=d.incident_id, version=2, kind=DecisionKind.DELIVER)
    await pump.decide(envelope(follow_up))
    await pump.drain()
    async with db.reader() as conn:
        approvals = await records.list_approvals(conn, "acme", run_id)
    async with api(deps) as client:
        approved = await decide(client, old.approval_id)
    await pump.close()
    # Then it is one incident update on the run's log, and the draft's substance did not change
    [updated] = await events_of(db, run_id, "INCIDENT_UPDATED")
    assert (updated["events"], updated["incident_version"], updated["substantive"]) == (1, 2, False)
    assert [a.state for a in approvals] == [ApprovalState.PENDING] and approved.status_code == 200


async def test_a_principal_without_the_role_is_forbidden_and_recorded(db: Database) -> None:
    pump, deps, _, _, run_id, approval = await waiting_for_approval(db)
    async with api(deps) as client:
        answer = await decide(client, approval.approval_id, who="viewer")
    await pump.close()
    assert (answer.status_code, answer.json()["errors"][0]["code"]) == (403, "role_missing")
    assert (await approval_of(db, approval.approval_id)).state == ApprovalState.PENDING
    [refused] = await events_of(db, run_id, "APPROVAL_DECISION_REFUSED")
    assert (refused["principal"], refused["code"]) == ("viewer", "role_missing")


async def test_reject_ends_the_run_without_a_ticket(db: Database) -> None:
    pump, deps, _, _, run_id, approval = await waiting_for_approval(db)
    async with api(deps) as client:
        answer = await decide(client, approval.approval_id, choice="reject")
        await pump.drain()
        detail = (await client.get(f"/v1/runs/{run_id}", headers=auth("viewer"))).json()
    await pump.close()
    assert answer.json()["state"] == "rejected"
    assert (detail["state"], detail["outcome"], detail["operations"]) == ("failed", "approval_rejected", [])


async def test_another_tenants_token_sees_nothing(db: Database) -> None:
    pump, deps, _, _, run_id, approval = await waiting_for_approval(db)
    async with api(deps) as client:
        answers = [await decide(client, approval.approval_id, who="other"),
                   await client.get(f"/v1/runs/{run_id}", headers=auth("other")),
                   await client.get(f"/v1/runs/{run_id}/events", headers=auth("other")),
                   await client.post(f"/v1/runs/{run_id}/cancel", headers=auth("other"))]
        listed = (await client.get("/v1/runs", headers=auth("other"))).json()
    await pump.close()
    assert [a.status_code for a in answers] == [404, 404, 404, 404]
    assert listed == {"runs": []}
    assert (await approval_of(db, approval.approval_id)).state == ApprovalState.PENDING




async def test_an_approval_finishes_approve_ticket_in_its_own_commit_without_a_second_claim(db: Database) -> None:
    """The decision's judgement, under the run lock, is approve_ticket's check: the step is DONE
    at the epoch that asked, create_ticket READY, both in the decision's transaction."""
    pump, deps, _, _, run_id, approval = await waiting_for_approval(db)
    pump.held.add("create_ticket")
    async with api(deps) as client:
        assert (await decide(client, approval.approval_id)).status_code == 200
        await pump.drain()
    async with db.reader() as conn:
        plan = {s.step_id: s for s in await steps.list_steps(conn, "acme", run_id)}
        log = [(e.type, e.data) for e in await runs.list_events(conn, "acme", run_id)]
    await pump.close()
    assert (plan["approve_ticket"].state, plan["approve_ticket"].owner_epoch) == (StepState.DONE, 1)
    assert plan["create_ticket"].state == StepState.READY
    assert log[-3:] == [
        ("APPROVAL_APPROVED", {"approval_id": approval.approval_id, "principal": "lead",
                               "payload_hash": approval.payload_hash, "resource_version": approval.resource_version}),
        ("APPROVAL_CHECKED", {"approval_id": approval.approval_id, "by": "decision"}),
        ("STEP_READY", {"step_id": "create_ticket"})]


async def test_an_incident_that_moves_on_after_approval_is_asked_again_before_any_send(db: Database) -> None:
    pump, deps, _, d, run_id, first = await waiting_for_approval(db)
    pump.held.add("create_ticket")  # stop the run between approve_ticket and create_ticket
    async with api(deps) as client:
        assert (await decide(client, first.approval_id)).status_code == 200
        await pump.drain()
        await pump.update(incident_update(run_id, d.incident_id, 1, version=2, names=("DiskFull",)))  # news
        await pump.release()
        async with db.reader() as conn:
            run = await runs.get_run(conn, "acme", run_id)
            approvals = await records.list_approvals(conn, "acme", run_id)
            tickets = await BuiltinTicketSystem(db, deps.clock).list_tickets("acme")
        assert (run.state, run.wait_kind, tickets) == (RunState.WAITING, WaitKind.APPROVAL, [])
        assert [(a.step_id, a.resource_version, a.state) for a in approvals] == [
            ("approve_ticket", 1, ApprovalState.APPROVED), ("create_ticket", 2, ApprovalState.PENDING)]
        assert (await decide(client, approvals[1].approval_id)).status_code == 200
        await pump.drain()
    await pump.close()
    async with db.reader() as conn:
        run = await runs.get_run(conn, "acme", run_id)
        [op] = await operations.list_operations(conn, "acme", run_id)
        log = [e.type for e in await runs.list_events(conn, "acme", run_id)]
    assert (run.state, op.approval_id, op.external_ref) == (RunState.COMPLETED, approvals[1].approval_id, "INC-1")
    assert log.index("OPERATION_HELD") < log.index("OPERATION_SUBMITTED")
