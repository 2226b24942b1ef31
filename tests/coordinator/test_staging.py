"""Staging never causes a production side effect: a staging run binds sandbox targets only, and
the coordinator checks the stored binding again when it dispatches: a binding tampered with
after the run was created creates no ticket and sends nothing, and the refusal is recorded. With
``staging_auto_approve`` a staging run is approved by ira itself (recorded as such) and files its
ticket in the sandbox; the production ticket system (a Jira fake) is never called, and a
production run is never auto-approved."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from sqlalchemy import update

from ira.connectors.tickets.sandbox import SandboxTicketSystem, sandbox_tenant
from ira.connectors.tickets.tenants import remote_ticket_system
from ira.coordinator import records
from ira.coordinator.gate import AUTO_APPROVER
from ira.coordinator.intake import open_run_for
from ira.core.clock import FrozenClock
from ira.core.ports import TicketSystem
from ira.core.replay import SANDBOX_TICKETS, STAGING, STAGING_SINK
from ira.core.states import RunState, WaitKind
from ira.readmodel.tickets import list_tickets
from ira.runtime.settings.tickets import TicketsSettings
from ira.runtime.store import runs
from ira.runtime.store.database import Database
from ira.runtime.store.schema import runs as runs_table
from tests.coordinator.harness import T0, api, auth, build, decision, envelope, run_for_incident
from tests.fakes.jira import FakeJira
from tests.serving import serve


def staging_decision():  # type: ignore[no-untyped-def]
    d = decision()
    return d.model_copy(update={"environment": STAGING, "alert": d.alert.model_copy(update={"environment": STAGING})})


async def staging_run_waiting(db: Database, **built: Any):  # type: ignore[no-untyped-def]
    pump, deps = build(db, clock=FrozenClock(T0), **built)
    d = staging_decision()
    await pump.decide(envelope(d))
    await pump.drain()
    async with db.reader() as conn:
        run = await open_run_for(conn, "acme", d.incident_id)
        assert run is not None and (run.state, run.wait_kind) == (RunState.WAITING, WaitKind.APPROVAL)
        [approval] = await records.list_approvals(conn, "acme", run.run_id)
    return pump, deps, run, approval


@pytest.fixture
async def jira() -> AsyncIterator[tuple[FakeJira, TicketSystem]]:
    """The tenant's production ticket system: Jira (its fake, which records every request)."""
    fake = FakeJira()
    async with serve(fake) as url:
        yield fake, remote_ticket_system(TicketsSettings.model_validate(fake.settings(url)), FrozenClock(T0))


async def tamper(db: Database, run_id: str, **targets: str) -> None:
    async with db.transaction() as conn:
        run = await runs.get_run(conn, "acme", run_id)
        bindings = {**run.bindings, "targets": {**run.bindings["targets"], **targets}}
        await conn.execute(update(runs_table).where(runs_table.c.tenant_id == "acme", runs_table.c.run_id == run_id)
                           .values(bindings=bindings))


async def test_a_staging_run_binds_sandboxes_and_its_approval_request_goes_to_the_staging_sink(db: Database) -> None:
    pump, deps, run, _ = await staging_run_waiting(db)
    async with api(deps) as client:
        detail = (await client.get(f"/v1/runs/{run.run_id}", headers=auth("viewer"))).json()
        listed = (await client.get("/v1/runs", headers=auth("viewer"))).json()["runs"]
        staging = (await client.get("/v1/runs", params={"environment": STAGING}, headers=auth("viewer"))).json()
    await pump.close()
    assert detail["environment"] == STAGING
    assert detail["bindings"]["targets"] == {"tickets": SANDBOX_TICKETS, "notifications": STAGING_SINK}
    assert [d["channel"] for d in detail["deliveries"]] == [STAGING_SINK]
    assert listed == [] and [r["run_id"] for r in staging["runs"]] == [run.run_id]


async def test_a_tampered_production_binding_is_refused_at_dispatch(db: Database, jira) -> None:  # type: ignore[no-untyped-def]
    fake, production = jira
    pump, deps, run, approval = await staging_run_waiting(db, tickets=production,
                                                          sandbox=SandboxTicketSystem(db, FrozenClock(T0)))
    await tamper(db, run.run_id, tickets="tenant", notifications="slack")
    async with api(deps) as client:
        answer = await client.post(f"/v1/approvals/{approval.approval_id}/decision", headers=auth("lead"),
                                   json={"decision": "approve"})
        assert answer.status_code == 200, answer.text
        await pump.drain()
        detail = (await client.get(f"/v1/runs/{run.run_id}", headers=auth("viewer"))).json()
        tickets = (await client.get("/v1/tickets", headers=auth("viewer"))).json()["tickets"]
    await pump.close()
    assert tickets == [] and fake.requests == []  # nothing created, Jira never asked
    assert await sandbox_tickets(db) == []
    async with db.reader() as conn:
        refused = [e.data for e in await runs.list_events(conn, "acme", run.run_id) if e.type == "OPERATION_REFUSED"]
    assert [r["reason"] for r in refused] == ["staging_production_target: tickets bound to 'tenant'"]
    assert [o["fact_state"] for o in detail["operations"]] == ["confirmed_failure"]
    assert {d["channel"] for d in detail["deliveries"]} == {STAGING_SINK}  # nothing sent to Slack


async def test_an_untampered_staging_run_creates_no_ticket_either(db: Database) -> None:
    pump, deps, run, approval = await staging_run_waiting(db)
    async with api(deps) as client:
        await client.post(f"/v1/approvals/{approval.approval_id}/decision", headers=auth("lead"),
                          json={"decision": "approve"})
        await pump.drain()
        tickets = (await client.get("/v1/tickets", headers=auth("viewer"))).json()["tickets"]
    await pump.close()
    async with db.reader() as conn:
        refused = [e.data for e in await runs.list_events(conn, "acme", run.run_id) if e.type == "OPERATION_REFUSED"]
    assert tickets == [] and [r["reason"].split(":")[0] for r in refused] == ["staging_sandbox"]


async def sandbox_tickets(db: Database) -> list[str]:
    async with db.reader() as conn:
        return [t.key for t in (await list_tickets(conn, sandbox_tenant("acme"))).tickets]


async def test_an_auto_approved_staging_run_files_its_ticket_in_the_sandbox_only(db: Database, jira) -> None:  # type: ignore[no-untyped-def]
    fake, production = jira
    pump, deps = build(db, clock=FrozenClock(T0), tickets=production, sandbox=SandboxTicketSystem(db, FrozenClock(T0)),
                       staging_auto_approve=True)
    d = staging_decision()
    await pump.decide(envelope(d))
    await pump.drain()
    async with db.reader() as conn:
        run = await open_run_for(conn, "acme", d.incident_id) or await run_for_incident(db, d.incident_id)
        assert run is not None
        [approval] = await records.list_approvals(conn, "acme", run.run_id)
        events = await runs.list_events(conn, "acme", run.run_id)
    async with api(deps) as client:
        detail = (await client.get(f"/v1/runs/{run.run_id}", headers=auth("viewer"))).json()
        production_list = (await client.get("/v1/tickets", headers=auth("viewer"))).json()["tickets"]
        staging_list = (await client.get("/v1/tickets", params={"environment": STAGING},
                                         headers=auth("viewer"))).json()["tickets"]
    await pump.close()
    assert detail["state"] == "completed"
    assert (approval.state.value, approval.decided_by) == ("approved", AUTO_APPROVER)
    assert [e.data["principal"] for e in events if e.type == "APPROVAL_APPROVED"] == [AUTO_APPROVER]
    [operation] = detail["operations"]
    assert (operation["fact_state"], operation["external_ref"]) == ("confirmed_success", "SBX-1")
    assert await sandbox_tickets(db) == ["SBX-1"] and fake.requests == []  # the production system never called
    assert production_list == [] and [(t["key"], t["system"]) for t in staging_list] == [("SBX-1", SANDBOX_TICKETS)]
    assert {d["channel"] for d in detail["deliveries"]} == {STAGING_SINK}  # nothing sent anywhere real


async def test_a_production_run_is_never_auto_approved(db: Database) -> None:
    pump, _ = build(db, clock=FrozenClock(T0), sandbox=SandboxTicketSystem(db, FrozenClock(T0)),
                    staging_auto_approve=True)
    d = decision()
    await pump.decide(envelope(d))
    await pump.drain()
    await pump.close()
    async with db.reader() as conn:
        run = await open_run_for(conn, "acme", d.incident_id)
        assert run is not None and (run.state, run.wait_kind) == (RunState.WAITING, WaitKind.APPROVAL)
        [approval] = await records.list_approvals(conn, "acme", run.run_id)
    assert approval.state.value == "pending" and approval.decided_by is None
