"""Eager run requests: a ``create_run`` that triage commits in the coordinator's own process
starts the run right after that commit, with no relay and no broker (a storm's backlog there
cannot delay it); the outbox row stays for other processes and recovery, and the broker's
copy, when it comes, is a duplicate for the coordinator's inbox."""

from __future__ import annotations

from sqlalchemy import func, select

from ira.connectors.tickets.builtin import BuiltinTicketSystem
from ira.coordinator.deps import Deps
from ira.coordinator.handlers import step_handlers
from ira.coordinator.worker import CoordinatorWorker
from ira.core.alert import DecisionKind
from ira.core.clock import FrozenClock
from ira.core.envelope import Envelope
from ira.runtime.bus.eager import EagerStats
from ira.runtime.bus.producer import BusProducer
from ira.runtime.bus.record import Outcome
from ira.runtime.dispatch import StepDispatcher
from ira.runtime.store.database import Database
from ira.runtime.store.schema import inbox, outbox
from ira.runtime.store.schema import runs as runs_table
from tests.coordinator.harness import config
from tests.eventually import eventually
from tests.triage.builders import T0, alert
from tests.triage.harness import apply, handler

NO_BROKER = "127.0.0.1:9"
"""Nothing listens here: the worker's consumers are never started in these tests."""


def coordinator(db: Database) -> CoordinatorWorker:
    clock = FrozenClock(T0)
    deps = Deps(db=db, clock=clock, config=config(), tickets=BuiltinTicketSystem(db, clock))
    dispatcher = StepDispatcher(db=db, clock=clock, handlers=step_handlers(deps), owner="coordinator-eager")
    return CoordinatorWorker(deps, dispatcher, bootstrap=NO_BROKER, producer=BusProducer(NO_BROKER))


async def run_count(db: Database, evaluation_id: str) -> int:
    async with db.reader() as conn:
        return int((await conn.execute(select(func.count()).select_from(runs_table).where(
            runs_table.c.idempotency_key == evaluation_id))).scalar_one())


async def decision_row(db: Database, evaluation_id: str) -> tuple[Envelope, str, bool]:
    """The run request's outbox row: its envelope, key, and whether the relay sent it."""
    async with db.reader() as conn:
        row = (await conn.execute(select(outbox.c.value, outbox.c.key, outbox.c.sent_at).where(
            outbox.c.message_id == evaluation_id))).one()
    return Envelope.from_bytes(row.value), row.key, row.sent_at is not None


async def test_a_run_request_committed_by_triage_starts_its_run_without_relay_or_broker(db: Database) -> None:
    worker, triage = coordinator(db), handler(FrozenClock(T0))
    with worker.eager.listening(db):
        evaluation = await apply(db, triage, alert(fingerprint="fp-new"))
        assert evaluation.decision == DecisionKind.CREATE_RUN
        await eventually(lambda: run_count(db, evaluation.evaluation_id), timeout=10)
    assert worker.eager.stats.applied == 1
    envelope, key, sent = await decision_row(db, evaluation.evaluation_id)
    assert not sent  # nothing relayed it: the run came from the commit itself
    async with db.reader() as conn:  # the same inbox row as the broker's copy would have written
        assert (await conn.execute(select(inbox.c.message_id).where(
            inbox.c.consumer == "coordinator"))).scalars().all() == [evaluation.evaluation_id]
    # the broker's copy arrives later: the inbox drops it, one run stays
    outcome = await worker.decisions.apply_local(envelope, topic="ira.incidents.v1", key=key)
    assert outcome == Outcome.DUPLICATE
    assert await run_count(db, evaluation.evaluation_id) == 1


async def test_only_run_requests_of_this_environment_are_taken(db: Database) -> None:
    worker, staging = coordinator(db), handler(FrozenClock(T0), environment="staging")
    with worker.eager.listening(db):
        evaluation = await apply(db, staging, alert(fingerprint="fp-staging"))
    assert evaluation.decision == DecisionKind.CREATE_RUN
    assert worker.eager.stats == EagerStats()  # staging's run request is staging's coordinator's
    assert await run_count(db, evaluation.evaluation_id) == 0
