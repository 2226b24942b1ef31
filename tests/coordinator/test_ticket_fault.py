"""Exactly one ticket when the coordinator PROCESS dies after the ticket was created and
before its receipt was stored (the ``ticket.after_create`` fault point, SIGKILL) — with each
ticket system chosen in the process's config: builtin, Jira and GitHub (their fakes)."""

from __future__ import annotations

import asyncio
import json
import os
import signal
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import func, select

from ira.connectors.tickets.builtin import BuiltinTicketSystem
from ira.connectors.tickets.schema import tickets
from ira.connectors.tickets.tenants import remote_ticket_system
from ira.coordinator import operations, records
from ira.coordinator.deps import Deps
from ira.coordinator.handlers import step_handlers
from ira.coordinator.receipt import namespace
from ira.coordinator.worker import CoordinatorWorker
from ira.core.clock import Clock, SystemClock
from ira.core.commit import EventDraft, Fence, RunCommit, StepChange
from ira.core.errors import StaleEpochError
from ira.core.events import RunEventType
from ira.core.ports import TicketSystem
from ira.core.states import OperationFact, RunState, StepState
from ira.core.ticket import TicketRequest
from ira.infra.demo import DEMO_BUNDLE
from ira.infra.tansu import EmbeddedKafka
from ira.runtime.bus.admin import ensure_topics
from ira.runtime.bus.producer import BusProducer
from ira.runtime.dispatch import StepDispatcher
from ira.runtime.relay import OutboxRelay
from ira.runtime.scanner import Scanner
from ira.runtime.settings.tickets import TicketsSettings
from ira.runtime.store import runs, steps
from ira.runtime.store.database import Database
from ira.runtime.store.migrate import upgrade
from tests.coordinator.harness import api, auth, config, decision, envelope
from tests.coordinator.live import FAST, Live, agents_consumer
from tests.coordinator.scripted import ScriptedInvestigators
from tests.coordinator.test_walk import _state, _waiting
from tests.eventually import eventually
from tests.fakes.github import FakeGitHub
from tests.fakes.jira import FakeJira
from tests.fakes.ticketing import FakeTicketApi
from tests.processes import free_port, ira_command
from tests.serving import serve

PROD = "prod"
LEASE = timedelta(seconds=2)
CONFIG = """
runtime:
  step_lease: 2s
kafka:
  session_timeout: 2s
coordinator:
  root_budget: {steps: 40, tool_calls: 40}
  branch_budget: {steps: 5, tool_calls: 5}
""" + f"agents:\n  recorded_bundle: {DEMO_BUNDLE}\n"


@asynccontextmanager
async def running(*loops: object) -> AsyncIterator[None]:
    stop = asyncio.Event()
    tasks = [asyncio.create_task(loop.run(stop)) for loop in loops]  # type: ignore[attr-defined]
    try:
        yield
    finally:
        stop.set()
        await asyncio.wait_for(asyncio.gather(*tasks, return_exceptions=True), timeout=30)


@dataclass(frozen=True)
class Tickets:
    """The ticket system under test: its ``tickets:`` config and, for Jira/GitHub, the fake."""

    settings: dict[str, Any]
    fake: FakeTicketApi | None = None

    def system(self, db: Database, clock: Clock) -> TicketSystem:
        if self.fake is None:
            return BuiltinTicketSystem(db, clock)
        return remote_ticket_system(TicketsSettings.model_validate(self.settings), clock)

    async def count(self, db: Database) -> int:
        return len(self.fake.issues) if self.fake is not None else await _ticket_count(db)


@pytest.fixture(params=["builtin", "jira", "github"])
async def tickets_config(request: pytest.FixtureRequest) -> AsyncIterator[Tickets]:
    if request.param == "builtin":
        yield Tickets({"kind": "builtin"})
        return
    fake: FakeTicketApi = FakeJira() if request.param == "jira" else FakeGitHub()
    async with serve(fake) as url:
        yield Tickets(fake.settings(url), fake)


async def coordinator_process(tmp_path: Path, url: str, bootstrap: str, redis_url: str,
                              tickets: Tickets) -> asyncio.subprocess.Process:
    tenants = {"acme": {"tickets": tickets.settings}}
    (tmp_path / "ira.yaml").write_text(CONFIG + f"tenants: {json.dumps(tenants)}\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("IRA_")} | {
        "IRA_CONFIG": str(tmp_path / "ira.yaml"), "IRA_DATABASE_URL": url, "IRA_REDIS_URL": redis_url,
        "IRA_KAFKA_BOOTSTRAP": bootstrap, "IRA_HTTP_PORT": str(free_port()), "IRA_FAULTS": "ticket.after_create"}
    return await asyncio.create_subprocess_exec(ira_command(), "worker", "--role", "coordinator", env=env,
                                                cwd=tmp_path, stdout=asyncio.subprocess.PIPE,
                                                stderr=asyncio.subprocess.STDOUT)


@pytest.mark.slow
async def test_killed_after_create_the_next_owner_adopts_the_ticket(
    private_kafka: EmbeddedKafka, redis_url: str, tmp_path: Path, tickets_config: Tickets,
) -> None:
    # Given a coordinator process armed to die right after the ticket system created the ticket
    await ensure_topics(private_kafka.bootstrap, PROD, partitions=1)
    url = f"sqlite:///{tmp_path / 'ira.db'}"
    db = Database.create(url)
    await upgrade(db)
    clock = SystemClock()
    system = tickets_config.system(db, clock)
    deps = Deps(db=db, clock=clock, config=config(PROD), tickets=system)
    scripted = ScriptedInvestigators(db, clock)
    agent_tasks: set[asyncio.Task[None]] = set()
    d = decision()
    async with BusProducer(private_kafka.bootstrap) as producer:
        relay = OutboxRelay(db=db, publisher=producer, clock=clock, poll_interval=timedelta(milliseconds=20))
        scanner = Scanner(db=db, clock=clock, environment=PROD, interval=timedelta(milliseconds=300),
                          quiet=timedelta(seconds=1))
        agents = agents_consumer(scripted, scripted.dispatcher(), bootstrap=private_kafka.bootstrap,
                                 producer=producer, environment=PROD, tasks=agent_tasks)
        live = Live(deps=deps, producer=producer, scripted=scripted, worker=None, environment=PROD)  # type: ignore[arg-type]
        proc = await coordinator_process(tmp_path, url, private_kafka.bootstrap, redis_url, tickets_config)
        try:
            async with running(relay, scanner, agents):
                await live.publish(envelope(d))
                waiting = await eventually(lambda: _waiting(db, d.incident_id), timeout=90, message="approval asked")
                async with db.reader() as conn:
                    [approval] = await records.list_approvals(conn, "acme", waiting.run_id)
                # When the draft is approved and the process creates the ticket, then dies
                async with api(deps) as client:
                    answer = await client.post(f"/v1/approvals/{approval.approval_id}/decision",
                                               headers=auth("lead"), json={"decision": "approve"})
                    assert answer.status_code == 200, answer.text
                output = (await asyncio.wait_for(proc.communicate(), timeout=60))[0].decode(errors="replace")
                assert proc.returncode == -signal.SIGKILL, output
                assert "fault point ticket.after_create hit" in output
                if tickets_config.fake is not None:  # the credentials never reach a log line
                    assert tickets_config.fake.token not in output  # type: ignore[attr-defined]
                run_id = waiting.run_id
                op, step = await _operation_and_step(db, run_id)
                assert op.fact_state == OperationFact.SUBMITTED  # the receipt never reached the store
                assert step.state == StepState.RUNNING and await tickets_config.count(db) == 1
                dead_epoch = step.owner_epoch

                # Then a second owner (higher epoch) raises the barrier, finds the ticket by key, adopts it
                second = CoordinatorWorker(
                    deps, StepDispatcher(db=db, clock=clock, handlers=step_handlers(deps), owner="second",
                                         lease=LEASE),
                    bootstrap=private_kafka.bootstrap, producer=producer, consumer=FAST, group_suffix="-second")
                async with running(second):
                    await eventually(lambda: _state(db, d.incident_id, RunState.COMPLETED), timeout=60,
                                     message="completed by the second owner")
        finally:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()
            scripted.release.set()
            await asyncio.gather(*agent_tasks, return_exceptions=True)

    op, step = await _operation_and_step(db, run_id)
    assert await tickets_config.count(db) == 1
    expected = {"builtin": "INC-1", "jira": "OPS-1", "github": "#1"}[system.name]
    assert (op.fact_state, op.external_ref, op.external_system) == (
        OperationFact.CONFIRMED_SUCCESS, expected, system.name)
    assert (op.external_url is None) == (tickets_config.fake is None)
    if tickets_config.fake is not None:
        assert len(tickets_config.fake.calls("create")) == 1  # one request: sent once, adopted after the kill
    assert step.owner_epoch > dead_epoch
    async with db.reader() as conn:
        confirmed = [e for e in await runs.list_events(conn, "acme", run_id) if e.type == "OPERATION_CONFIRMED"]
    assert [e.data["adopted"] for e in confirmed] == [True]
    # And the old owner's late writes are refused: by the store (fence) and, where it can, by the
    # ticket system (barrier; Jira and GitHub cannot, which is why recovery never re-sends there)
    with pytest.raises(StaleEpochError):
        async with db.transaction() as conn:
            current = await runs.get_run(conn, "acme", run_id)
            await runs.commit(conn, RunCommit(
                tenant_id="acme", run_id=run_id, expected_version=current.state_version,
                fence=Fence(step_id="create_ticket", owner_epoch=dead_epoch),
                steps=(StepChange(step_id="create_ticket", state=StepState.DONE),),
                events=(EventDraft(type=RunEventType.TICKET_CREATED),)), at=clock.now())
    if await system.raise_barrier("acme", namespace(run_id), step.owner_epoch):
        with pytest.raises(StaleEpochError):
            await system.create(TicketRequest(tenant_id="acme", title="late", body="late", severity="critical",
                                              incident_id=d.incident_id), idempotency_key="another-key",
                                namespace=namespace(run_id), epoch=dead_epoch)
    assert await tickets_config.count(db) == 1
    await db.close()


async def _operation_and_step(db: Database, run_id: str):  # type: ignore[no-untyped-def]
    async with db.reader() as conn:
        op = await operations.for_step(conn, "acme", run_id, step_id="create_ticket")
        step = await steps.get_step(conn, "acme", run_id, "create_ticket")
    assert op is not None
    return op, step


async def _ticket_count(db: Database) -> int:
    async with db.reader() as conn:
        return int((await conn.execute(select(func.count()).select_from(tickets))).scalar() or 0)

