"""The ticket Operation's commits: how many write transactions stand between an approval and a
ticket, and what a stale owner still leaves behind.

``create_ticket`` commits the intent together with its SUBMITTED permit (nothing is written
between them and the send), and the receipt together with the step's end; an owner whose claim
was revoked meanwhile has its finish refused and still records the receipt.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import timedelta

import httpx
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncConnection

from ira.connectors.tickets.builtin import BuiltinTicketSystem
from ira.coordinator import operations, records
from ira.coordinator.deps import Deps
from ira.coordinator.handlers import step_handlers
from ira.coordinator.intake import open_run_for
from ira.coordinator.receipt import confirm
from ira.core.clock import FrozenClock
from ira.core.commit import EventDraft, RunCommit
from ira.core.delivery import NotificationKind
from ira.core.events import RunEventType
from ira.core.operation import Operation
from ira.core.ports import TicketSystem
from ira.core.states import OperationFact, RunState, StepState
from ira.core.ticket import Ticket, TicketRequest
from ira.runtime.dispatch import StepDispatcher
from ira.runtime.fault import FaultPoints
from ira.runtime.store import runs, steps
from ira.runtime.store.database import Database
from ira.runtime.store.schema import attempts
from tests.coordinator.gated import GatedTickets
from tests.coordinator.harness import T0, Pump, api, auth, config, decision, envelope
from tests.coordinator.scripted import ScriptedInvestigators
from tests.coordinator.test_approvals import decide, waiting_for_approval
from tests.store_fixtures import statements


class Trail:
    """What the ``create_ticket`` handler's task did, in order: its write commits, the fault
    points it passed and its calls to the ticket system (other tasks' commits are left out)."""

    def __init__(self) -> None:
        self.entries: list[tuple[asyncio.Task[object] | None, str]] = []

    def note(self, what: str) -> None:
        self.entries.append((asyncio.current_task(), what))

    def of_task_that(self, did: str) -> list[str]:
        [task] = {t for t, what in self.entries if what == did}
        return [what for t, what in self.entries if t is task]


class TrailFaults(FaultPoints):
    def __init__(self, trail: Trail) -> None:
        super().__init__()
        self.trail = trail

    def hit(self, name: str) -> None:
        self.trail.note(name)


class TrailTickets:
    def __init__(self, inner: TicketSystem, trail: Trail) -> None:
        self.inner, self.trail, self.name = inner, trail, inner.name

    async def create(self, request: TicketRequest, *, idempotency_key: str, namespace: str, epoch: int) -> Ticket:
        self.trail.note("send")
        ticket = await self.inner.create(request, idempotency_key=idempotency_key, namespace=namespace, epoch=epoch)
        self.trail.note("sent")
        return ticket

    async def find_by_key(self, tenant_id: str, idempotency_key: str) -> Ticket | None:
        self.trail.note("find_by_key")
        return await self.inner.find_by_key(tenant_id, idempotency_key)

    async def raise_barrier(self, tenant_id: str, namespace: str, epoch: int) -> bool:
        return await self.inner.raise_barrier(tenant_id, namespace, epoch)


def noting_commits(db: Database, trail: Trail) -> None:
    """Every write transaction of ``db`` that commits is noted on ``trail`` by the task that ran it."""
    transaction = db.transaction

    @asynccontextmanager
    async def noted() -> AsyncIterator[AsyncConnection]:
        async with transaction() as conn:
            yield conn
        trail.note("commit")

    db.transaction = noted  # type: ignore[method-assign]


async def test_the_intent_commits_with_its_permit_and_the_receipt_with_the_finish(db: Database) -> None:
    # Given a run waiting for approval whose coordinator notes its commits, fault points and sends
    trail, clock = Trail(), FrozenClock(T0)
    deps = Deps(db=db, clock=clock, config=config(), faults=TrailFaults(trail),
                tickets=TrailTickets(BuiltinTicketSystem(db, clock), trail))
    scripted = ScriptedInvestigators(db, clock, behaviour={})
    coordinator = StepDispatcher(db=db, clock=clock, handlers=step_handlers(deps), owner="coordinator-test",
                                 lease=timedelta(seconds=30))
    pump = Pump(db, deps, [coordinator, scripted.dispatcher(lease_seconds=30)], scripted=scripted)
    d = decision()
    await pump.decide(envelope(d))
    await pump.drain()
    async with db.reader() as conn:
        run = await open_run_for(conn, "acme", d.incident_id)
        assert run is not None and run.state == RunState.WAITING
        [approval] = await records.list_approvals(conn, "acme", run.run_id)
    run_id = run.run_id
    noting_commits(db, trail)
    # When it is approved and runs to its end
    async with api(deps) as client:
        assert (await decide(client, approval.approval_id)).status_code == 200
    await pump.drain()
    await pump.close()
    # Then nothing is committed between the intent and the send, and one commit holds the receipt
    # and the step's end (the intent's commit is the one the handler made before its first fault point)
    done = trail.of_task_that(did="ticket.after_finish")
    assert done[done.index("ticket.after_intent") - 1:] == [
        "commit", "ticket.after_intent", "ticket.after_submit", "send", "commit", "sent",  # the builtin's own
        "commit", "ticket.after_receipt", "ticket.after_finish"]
    async with db.reader() as conn:
        run = await runs.get_run(conn, "acme", run_id)
        log = [e.type for e in await runs.list_events(conn, "acme", run_id)]
    assert run.state == RunState.COMPLETED
    intent = log.index("OPERATION_INTENT_RECORDED")
    assert log[intent:intent + 2] == ["OPERATION_INTENT_RECORDED", "OPERATION_SUBMITTED"]
    confirmed = log.index("OPERATION_CONFIRMED")
    assert log[confirmed:confirmed + 2] == ["OPERATION_CONFIRMED", "TICKET_CREATED"]


@asynccontextmanager
async def ticket_in_flight(db: Database) -> AsyncIterator[tuple[httpx.AsyncClient, Pump, str]]:
    """An approved run whose ticket was created and whose receipt has not come back: the block
    runs meanwhile (with the API client, the pump and the run's id); then the receipt returns
    and the coordinator settles."""
    gated = GatedTickets(BuiltinTicketSystem(db, FrozenClock(T0)), hold="after")
    pump, deps, _, _, run_id, approval = await waiting_for_approval(db, tickets=gated)
    async with api(deps) as client:
        assert (await decide(client, approval.approval_id)).status_code == 200
        draining = asyncio.create_task(pump.drain())
        await asyncio.wait_for(gated.entered.wait(), timeout=10)
        yield client, pump, run_id
        gated.release.set()
        await asyncio.wait_for(draining, timeout=20)
    await pump.close()


async def test_an_owner_whose_claim_was_revoked_still_records_its_receipt(db: Database) -> None:
    # Given an approved run whose ticket was created and whose receipt has not come back
    async with ticket_in_flight(db) as (client, pump, run_id):
        # When the run is cancelled meanwhile (every claim revoked), and only then the receipt returns
        assert (await client.post(f"/v1/runs/{run_id}/cancel", headers=auth("admin"))).status_code == 202
    async with db.reader() as conn:
        [op] = await operations.list_operations(conn, "acme", run_id)
        step = await steps.get_step(conn, "acme", run_id, "create_ticket")
        log = await runs.list_events(conn, "acme", run_id)
    # Then the owner's receipt stands (not adopted by reconciliation: no timer was fired here), its
    # finish was refused and left no trace, and the log is still gapless
    assert (op.fact_state, op.external_ref) == (OperationFact.CONFIRMED_SUCCESS, "INC-1")
    [confirmed] = [e for e in log if e.type == "OPERATION_CONFIRMED"]
    assert (confirmed.data["adopted"], confirmed.data["late"]) == (False, True)
    assert step.state == StepState.SKIPPED and "TICKET_CREATED" not in [e.type for e in log]
    assert [e.run_seq for e in log] == list(range(1, len(log) + 1))
    assert NotificationKind.TICKET_CREATED in [d.payload["kind"] for d in pump.deliveries]


async def test_a_second_intent_with_the_same_key_returns_the_first_in_one_statement(db: Database) -> None:
    # Given a run and an intent recorded for its draft
    pump, _, _, _, run_id, _ = await waiting_for_approval(db)
    await pump.close()
    first = Operation(operation_id="op_first", tenant_id="acme", run_id=run_id, step_id="create_ticket",
                      kind="create_ticket", idempotency_key="sha256:k", payload_hash="sha256:draft",
                      fact_state=OperationFact.INTENT_RECORDED, owner_epoch=1, created_at=T0, updated_at=T0)
    async with db.transaction() as conn:
        assert await operations.record_intent(conn, first) == first
        # When another owner records the same intent (same key) in a transaction that goes on
        with statements(db) as seen:
            again = await operations.record_intent(conn, first.model_copy(update={"operation_id": "op_twin",
                                                                                  "owner_epoch": 2}))
        after = await operations.get_operation(conn, "acme", "op_first")
    # Then it gets the first back, with no savepoint spent on the conflict, and the transaction is intact
    assert (again.operation_id, again.owner_epoch, after.operation_id) == ("op_first", 1, "op_first")
    assert not [s for s in seen if "SAVEPOINT" in s.upper()]
    assert len(seen) == 2  # the conflicting insert and the read of the first


async def test_a_receipt_confirms_an_operation_in_doubt_without_reading_it_back(db: Database) -> None:
    # Given a SUBMITTED Operation of a run
    pump, deps, _, _, run_id, _ = await waiting_for_approval(db)
    await pump.close()
    op = Operation(operation_id="op_sent", tenant_id="acme", run_id=run_id, step_id="create_ticket",
                   kind="create_ticket", idempotency_key="sha256:sent", payload_hash="sha256:draft",
                   fact_state=OperationFact.INTENT_RECORDED, owner_epoch=1, created_at=T0, updated_at=T0)
    ticket = Ticket(tenant_id="acme", key="INC-9", idempotency_key="sha256:sent", payload_hash="sha256:p",
                    title="t", system="builtin", created_at=T0)
    async with db.transaction() as conn:
        await operations.record_intent(conn, op)
        assert await operations.move(conn, op, to=OperationFact.SUBMITTED, at=T0)
        run = await runs.get_run(conn, "acme", run_id)
        # When its receipt is recorded
        with statements(db) as seen:
            confirmed = await confirm(conn, run, op, ticket, adopted=False, epoch=1, config=deps.config, at=T0)
        stored = await operations.get_operation(conn, "acme", "op_sent")
    # Then it is confirmed by its compare-and-set alone, and the confirmation says what was stored
    assert [q for q in seen if q.lstrip().upper().startswith("SELECT") and "FROM operations" in q] == []
    assert (stored.fact_state, stored.external_ref) == (OperationFact.CONFIRMED_SUCCESS, "INC-9")
    assert (confirmed.operation.fact_state, confirmed.operation.external_ref) == (stored.fact_state, "INC-9")
    assert [e.type for e in confirmed.events] == ["OPERATION_CONFIRMED"]


async def approved_to_the_end(db: Database) -> tuple[list[str], str]:
    """A run waiting for approval, approved and run to its end: the statements from the decision
    on, and the run's id."""
    pump, deps, _, _, run_id, approval = await waiting_for_approval(db)
    async with api(deps) as client:
        with statements(db) as seen:
            assert (await decide(client, approval.approval_id)).status_code == 200
            await pump.drain()
    await pump.close()
    return seen, run_id


async def test_a_first_claim_writes_its_intent_submitted_and_reads_no_earlier_operation(db: Database) -> None:
    # Given a run waiting for approval; when it is approved and runs to its end
    seen, run_id = await approved_to_the_end(db)
    # Then create_ticket's first claim (epoch 1) looks for no Operation of its own before and
    # records its intent already SUBMITTED in one INSERT; the receipt's compare-and-set and the
    # verifier's read are the only other statements on Operations
    on_operations = [s.split(" ", 1)[0] for s in seen if re.search(r"(INTO|UPDATE|FROM) operations\b", s)]
    assert on_operations == ["INSERT", "UPDATE", "SELECT"]
    async with db.reader() as conn:
        [op] = await operations.list_operations(conn, "acme", run_id)
        log = [e.type for e in await runs.list_events(conn, "acme", run_id)]
    assert (op.fact_state, op.owner_epoch, op.external_ref) == (OperationFact.CONFIRMED_SUCCESS, 1, "INC-1")
    intent = log.index("OPERATION_INTENT_RECORDED")
    assert log[intent:intent + 2] == ["OPERATION_INTENT_RECORDED", "OPERATION_SUBMITTED"]


async def test_after_the_decision_only_the_permit_reads_the_run_where_writers_are_serialized(db: Database) -> None:
    """On SQLite (one writer at a time) create_ticket's permit decides on the run its claim read,
    the receipt's finish on the run as the permit's commit left it, and ``complete`` on the run
    its claim read (each commit's compare-and-set still guards it); on PostgreSQL each locks the
    run row, so concurrent writers queue."""
    seen, run_id = await approved_to_the_end(db)
    run_reads = [s for s in seen if s.startswith("SELECT runs.tenant_id, runs.run_id")]
    async with db.reader() as conn:  # one attempt per claim, whatever statements a claim takes
        run = await runs.get_run(conn, "acme", run_id)
        claims = (await conn.execute(select(attempts.c.attempt_id).where(
            attempts.c.run_id == run_id, attempts.c.step_id.in_(("create_ticket", "complete"))))).all()
    assert run.state == RunState.COMPLETED
    # besides the claims: the decision's (through its approval); on PostgreSQL also the permit's,
    # the receipt's and complete's
    assert len(run_reads) - len(claims) == (1 if db.engine.dialect.name == "sqlite" else 4)


async def move_run(db: Database, run_id: str) -> None:
    """Another writer moves the run (a non-substantive incident update): its version goes up."""
    async with db.transaction() as conn:
        run = await runs.get_run(conn, "acme", run_id)
        moved = EventDraft(type=RunEventType.INCIDENT_UPDATED, data={"substantive": False})
        await runs.commit(conn, RunCommit(tenant_id="acme", run_id=run_id, expected_version=run.state_version,
                                          events=(moved,)), at=T0)


async def ticket_outcome(db: Database, run_id: str) -> tuple[Operation, int, StepState, RunState, list[str]]:
    """The run's one Operation, create_ticket's epoch and state, the run's state, every ticket's key."""
    async with db.reader() as conn:
        [op] = await operations.list_operations(conn, "acme", run_id)
        step = await steps.get_step(conn, "acme", run_id, "create_ticket")
        run = await runs.get_run(conn, "acme", run_id)
    tickets = await BuiltinTicketSystem(db, FrozenClock(T0)).list_tickets("acme")
    return op, step.owner_epoch, step.state, run.state, [t.key for t in tickets]


async def test_a_run_that_moved_while_its_ticket_was_in_flight_still_finishes_with_the_receipt(db: Database) -> None:
    # Given an approved run whose ticket was created and whose receipt has not come back yet
    async with ticket_in_flight(db) as (_, _, run_id):
        # When another writer moves the run meanwhile (its version is no longer the permit's)
        await move_run(db, run_id)
    # Then the receipt and the step's end still commit together, by the same owner: one ticket
    op, epoch, step_state, run_state, tickets = await ticket_outcome(db, run_id)
    assert (op.fact_state, op.external_ref, tickets) == (OperationFact.CONFIRMED_SUCCESS, "INC-1", ["INC-1"])
    assert (step_state, epoch, run_state) == (StepState.DONE, 1, RunState.COMPLETED)


async def test_a_run_that_moved_after_create_tickets_claim_still_gets_its_one_ticket(db: Database) -> None:
    # Given an approved run whose create_ticket step was claimed
    pump, deps, _, _, run_id, approval = await waiting_for_approval(db)
    pump.held.add("create_ticket")
    async with api(deps) as client:
        assert (await decide(client, approval.approval_id)).status_code == 200
    await pump.drain()
    ctx = await pump.claim_parked()
    # When another writer moves the run before the permit's transaction
    await move_run(db, run_id)
    await pump.dispatchers[0].run_claimed(ctx)
    await pump.drain()
    await pump.close()
    # Then that claim still records the intent, sends once and finishes: one ticket, one Operation
    op, epoch, step_state, run_state, tickets = await ticket_outcome(db, run_id)
    assert (op.owner_epoch, op.external_ref, tickets) == (ctx.claim.owner_epoch, "INC-1", ["INC-1"])
    assert (step_state, epoch, run_state) == (StepState.DONE, ctx.claim.owner_epoch, RunState.COMPLETED)
