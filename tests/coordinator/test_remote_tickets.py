"""The ticket Operation with Jira and GitHub (their adapters against the fakes on 127.0.0.1):
what a system without a write barrier does to "not found", a rejected create, and the
ticket's link on the Operation and in ``GET /v1/tickets``."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import timedelta

import pytest

from ira.connectors.tickets.tenants import remote_ticket_system
from ira.coordinator import operations
from ira.coordinator.deps import Deps
from ira.coordinator.reconcile import LOOKS_AGAIN
from ira.core.clock import FrozenClock
from ira.core.operation import Operation
from ira.core.run import Run
from ira.core.states import OperationFact, OperationHandling, RunState, WaitKind
from ira.runtime.scanner import Scanner
from ira.runtime.settings import Settings
from ira.runtime.settings.tickets import TicketsSettings
from ira.runtime.store import runs
from ira.runtime.store.database import Database
from ira.runtime.wakeup import step_wakeup
from tests.coordinator.harness import T0, Pump, api, api_settings, auth
from tests.coordinator.test_approvals import decide, waiting_for_approval
from tests.fakes.github import FakeGitHub
from tests.fakes.jira import FakeJira
from tests.fakes.ticketing import FakeTicketApi
from tests.serving import serve

Remote = tuple[FakeTicketApi, TicketsSettings]


@pytest.fixture(params=["jira", "github"])
async def remote(request: pytest.FixtureRequest) -> AsyncIterator[Remote]:
    fake: FakeTicketApi = FakeJira() if request.param == "jira" else FakeGitHub()
    async with serve(fake) as url:
        yield fake, fake.tickets(url)


def settings_with(tickets: TicketsSettings) -> Settings:
    return api_settings().model_copy(update={"tickets": tickets})


async def test_not_found_after_a_lost_answer_is_looked_up_again_never_sent_again(
    db: Database, remote: Remote,
) -> None:
    fake, tickets = remote
    # Given an approved draft whose create is applied remotely, its answer lost, the search lagging
    fake.faults.drop("create")
    fake.faults.hide_new = True
    pump, deps, clock, run_id = await approved(db, tickets)
    # When the next attempt finds nothing by key
    wake = step_wakeup("acme", run_id, "create_ticket", kind="create_ticket", environment="prod", at=T0).envelope
    await pump.dispatchers[0].handle_wakeup(wake)
    # Then it parks the Operation UNKNOWN instead of sending again (no barrier: not definitive)
    op, run = await _operation_and_run(db, run_id)
    assert (op.fact_state, op.handling_state) == (OperationFact.UNKNOWN, OperationHandling.RECONCILING)
    assert (run.state, run.wait_kind) == (RunState.WAITING, WaitKind.EXTERNAL)
    assert len(fake.calls("create")) == 1
    # And once the issue is searchable, the next look adopts it and the run completes
    fake.index()
    clock.advance(deps.config.operation_deadline / (LOOKS_AGAIN + 1) + timedelta(seconds=1))
    await Scanner(db=db, clock=clock, environment="prod").scan_once()
    await pump.drain()
    op, run = await _operation_and_run(db, run_id)
    assert run.state == RunState.COMPLETED
    assert (op.fact_state, op.external_system) == (OperationFact.CONFIRMED_SUCCESS, tickets.kind)
    assert op.external_ref in ("OPS-1", "#1") and op.external_url and op.external_url.endswith(("OPS-1", "/1"))
    assert len(fake.calls("create")) == 1 and len(fake.issues) == 1
    # And GET /v1/tickets lists it from the tenant's configured system, with its link
    async with api(deps, settings=settings_with(tickets)) as client:
        listed = (await client.get("/v1/tickets", headers=auth("viewer"))).json()["tickets"]
    assert [(t["system"], t["key"], t["url"]) for t in listed] == [(tickets.kind, op.external_ref, op.external_url)]
    await pump.close()


async def test_a_rejected_create_fails_the_operation_with_the_providers_message(
    db: Database, remote: Remote,
) -> None:
    fake, tickets = remote
    fake.faults.fail("create", 400, message="Component 'payments' does not exist")
    pump, _, _, run_id = await approved(db, tickets)
    op, run = await _operation_and_run(db, run_id)
    assert op.fact_state == OperationFact.CONFIRMED_FAILURE
    assert op.error is not None and "HTTP 400: Component 'payments' does not exist" in op.error
    assert run.state == RunState.FAILED and len(fake.issues) == 0
    await pump.close()


async def approved(db: Database, tickets: TicketsSettings) -> tuple[Pump, Deps, FrozenClock, str]:
    """A run whose draft was just approved and whose create_ticket step ran once."""
    pump, deps, clock, _, run_id, approval = await waiting_for_approval(
        db, tickets=remote_ticket_system(tickets, FrozenClock(T0)))
    async with api(deps) as client:
        assert (await decide(client, approval.approval_id)).status_code == 200
    await pump.drain()
    return pump, deps, clock, run_id


async def _operation_and_run(db: Database, run_id: str) -> tuple[Operation, Run]:
    async with db.reader() as conn:
        op = await operations.for_step(conn, "acme", run_id, step_id="create_ticket")
        run = await runs.get_run(conn, "acme", run_id)
    assert op is not None
    return op, run
