"""Step intake: a step this process's commit readied starts right after the commit (eager
dispatch); its wake-up, taken in the transaction, is never published (the outbox row is written
as sent), and a step lost with its process is found again by the scanner from SQL."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from datetime import timedelta

import pytest
from sqlalchemy import func, select, text

from ira.core.clock import FrozenClock
from ira.core.commit import Fence, NewRun, OutboxMessage, RunCommit, StepChange
from ira.core.envelope import Envelope
from ira.core.ports import RawRecord
from ira.core.states import RunState, StepState
from ira.runtime.dispatch import StepContext, StepDispatcher
from ira.runtime.intake import StepIntake
from ira.runtime.relay import OutboxRelay
from ira.runtime.scanner import Scanner
from ira.runtime.store import runs, steps
from ira.runtime.store.database import Database
from ira.runtime.store.schema import attempts, outbox
from ira.runtime.wakeup import step_wakeup
from tests.contracts.test_store import T0, new_run
from tests.eventually import eventually
from tests.runtime.test_dispatch import counting_transactions, finish, step_state
from tests.store_fixtures import statements


def intake_running(db: Database, handled: list[str], *, size: int = 4, gate: asyncio.Event | None = None,
                   clock: FrozenClock | None = None, intake: type[StepIntake] = StepIntake,
                   backlog: int = 256) -> StepIntake:
    """An intake for ``metrics`` steps whose handler records the run, waits for ``gate``, then finishes."""

    async def handler(ctx: StepContext) -> None:
        handled.append(ctx.claim.run_id)
        if gate is not None:
            await gate.wait()
        await finish(db, ctx)

    return intake(StepDispatcher(db=db, clock=clock or FrozenClock(T0), handlers={"metrics": handler}, owner="w1"),
                  size, backlog=backlog)


def ready_run() -> NewRun:
    """A run whose ``metrics`` step is READY, with that step's wake-up in its outbox."""
    new = new_run()
    return new.model_copy(update={"outbox": (step_wakeup("acme", new.run_id, "metrics", kind="metrics",
                                                         environment="prod", at=T0),)})


async def create_ready_run(db: Database) -> tuple[str, Envelope]:
    """Commit a :func:`ready_run`; returns its id and the wake-up its transaction wrote."""
    new = ready_run()
    async with db.transaction() as conn:
        run, _ = await runs.create_run(conn, new, at=T0)
    return run.run_id, new.outbox[0].envelope


async def is_unsent(db: Database, wakeup: Envelope) -> bool:
    async with db.reader() as conn:
        return bool((await conn.execute(select(func.count()).select_from(outbox).where(
            outbox.c.message_id == wakeup.message_id, outbox.c.sent_at.is_(None)))).scalar())


async def test_a_step_readied_by_a_local_commit_runs_without_the_broker(db: Database) -> None:
    # Given an intake taking this process's commits (no consumer, no relay)
    handled: list[str] = []
    intake = intake_running(db, handled)
    with intake.eager(db):
        # When a transaction commits a run with a READY step and its wake-up
        run_id, wakeup = await create_ready_run(db)
        # Then the step is claimed and finished with no broker in between
        await eventually(lambda: handled == [run_id], timeout=10)
        await eventually(lambda: intake.dispatcher.stats.claimed == 1 and not intake._running, timeout=10)
        assert await step_state(db, run_id) == StepState.DONE
    assert (intake.stats.eager, intake.stats.unpublished, intake.stats.relayed) == (1, 1, 0)
    await intake.drain()


class RecordingPublisher:
    """The broker, as the relay sees it: acknowledges everything, remembers what it got."""

    def __init__(self) -> None:
        self.records: list[RawRecord] = []

    async def publish_raw(self, topic: str, key: str, value: bytes, headers: object) -> object:
        raise NotImplementedError

    async def publish_raw_many(self, records: list[RawRecord], *, pack: object = ()) -> list[object]:
        self.records += records
        return [None] * len(records)


async def relayed(db: Database) -> dict[str, list[Envelope]]:
    """What one relay pass publishes now, by step kind."""
    publisher = RecordingPublisher()
    await OutboxRelay(db=db, publisher=publisher, clock=FrozenClock(T0)).relay_once()
    by_kind: dict[str, list[Envelope]] = {}
    for envelope in (Envelope.from_bytes(r.value) for r in publisher.records):
        by_kind.setdefault(envelope.payload["kind"], []).append(envelope)
    return by_kind


async def test_a_step_taken_in_its_transaction_produces_no_broker_record(db: Database) -> None:
    # Given an intake taking this process's commits, with a free slot
    handled: list[str] = []
    intake = intake_running(db, handled)
    with intake.eager(db):
        # When a transaction commits a READY step and its wake-up
        run_id, wakeup = await create_ready_run(db)
        await eventually(lambda: handled == [run_id] and not intake._running, timeout=10)
    # Then the relay does not publish its wake-up (taken by this process's worker, it got no
    # outbox row at all), only the next step's, for the role that runs it
    assert {kind: len(wakeups) for kind, wakeups in (await relayed(db)).items()} == {"join": 1}
    async with db.reader() as conn:
        rows = (await conn.execute(select(outbox.c.message_id).where(
            outbox.c.message_id == wakeup.message_id))).all()
    assert rows == []
    await intake.drain()


async def assert_claimed_by_w1(db: Database, intake: StepIntake, run_id: str, step_id: str) -> None:
    """The step is RUNNING under ``intake``'s lease (owner w1), epoch 1, its attempt started."""
    async with db.reader() as conn:
        step = await steps.get_step(conn, "acme", run_id, step_id)
        started = (await conn.execute(select(attempts.c.owner, attempts.c.owner_epoch, attempts.c.ended_at)
                                      .where(attempts.c.run_id == run_id, attempts.c.step_id == step_id))).all()
    assert (step.state, step.owner, step.owner_epoch, step.lease_until) == (
        StepState.RUNNING, "w1", 1, T0 + intake.dispatcher.lease)
    assert [tuple(r) for r in started] == [("w1", 1, None)]


async def test_a_new_runs_step_this_process_runs_is_inserted_claimed(db: Database) -> None:
    # Given an intake taking this process's commits, its handler held at a gate
    handled: list[str] = []
    gate = asyncio.Event()
    intake = intake_running(db, handled, gate=gate)
    with intake.eager(db):
        # When a transaction creates a run whose READY step this intake takes
        with statements(db) as executed:
            run_id, _ = await create_ready_run(db)
        await eventually(lambda: handled == [run_id], timeout=10)
        # Then the step went in claimed by this process, in its INSERT: no claim UPDATE, no
        # read of the run, and the attempt started in the same transaction
        assert not [s for s in executed if s.startswith("UPDATE steps") or s.startswith("SELECT runs")], executed
        await assert_claimed_by_w1(db, intake, run_id, "metrics")
        # and the handler, holding that claim, finishes it
        gate.set()
        await eventually(lambda: not intake._running, timeout=10)
    assert await step_state(db, run_id) == StepState.DONE
    assert intake.dispatcher.stats.claimed == 1 and intake.stats.unpublished == 1
    # its wake-up, taken before the step went in, got no outbox row; only the join's did
    assert await woken_in_outbox(db, run_id) == ["join"]
    await intake.drain()


async def woken_in_outbox(db: Database, run_id: str) -> list[str]:
    """The steps of run ``run_id`` whose wake-ups have an outbox row, in the order written."""
    async with db.reader() as conn:
        values = (await conn.execute(select(outbox.c.value).where(outbox.c.key == f"acme:{run_id}")
                                     .order_by(outbox.c.id))).scalars().all()
    return [Envelope.from_bytes(v).payload["step_id"] for v in values]


class TakesAndDies:
    """A process that took a wake-up in its transaction and died before claiming the step
    (a taker that does not claim in the transaction; the intake does)."""

    def take(self, message: OutboxMessage) -> str | None:
        return "dead-worker"

    async def taken(self, conn: object, message: OutboxMessage) -> None:
        pass

    def committed(self, messages: object) -> None:
        pass

    def abandoned(self, messages: object) -> None:
        pass


async def test_a_step_taken_by_a_process_that_died_is_woken_again_by_the_scanner(db: Database) -> None:
    # Given a wake-up taken in its transaction by a process that then died (nothing relayed)
    with db.listening(TakesAndDies()):
        run_id, wakeup = await create_ready_run(db)
    assert await relayed(db) == {}
    # When the scanner passes after its quiet period
    clock = FrozenClock(T0)
    scanner = Scanner(db=db, clock=clock, environment="prod", quiet=timedelta(seconds=10))
    clock.advance(timedelta(seconds=11))
    assert (await scanner.scan_once()).woken == 1
    # Then a new wake-up for the step goes to the broker, and a live process runs the step
    [again] = (await relayed(db))["metrics"]
    assert again.payload == wakeup.payload and again.message_id != wakeup.message_id
    handled: list[str] = []
    intake = intake_running(db, handled)
    await intake.wakeup(again)
    await eventually(lambda: handled == [run_id] and not intake._running, timeout=10)
    assert await step_state(db, run_id) == StepState.DONE


async def test_the_brokers_copy_of_an_eager_wakeup_is_dropped_without_a_claim(db: Database) -> None:
    # Given a wake-up relayed as usual (no slot was free while its transaction wrote it) ...
    handled: list[str] = []
    intake = intake_running(db, handled)
    new = ready_run()
    async with db.transaction() as conn:
        run_id = (await runs.create_run(conn, new, at=T0))[0].run_id
    wakeup = new.outbox[0].envelope
    # ... whose step this process took once the transaction committed
    intake.committed(new.outbox)
    await eventually(lambda: handled == [run_id], timeout=10)
    # When the relayed wake-up arrives later
    await intake.wakeup(wakeup)
    # Then it is dropped here: no second claim attempt reaches the store
    assert intake.stats.deduped == 1
    assert intake.dispatcher.stats.not_claimable == 0 and intake.dispatcher.stats.claimed == 1
    await intake.drain()


async def test_a_rolled_back_transaction_hands_nothing_over(db: Database) -> None:
    handled: list[str] = []
    intake = intake_running(db, handled)
    with intake.eager(db), pytest.raises(RuntimeError):
        async with db.transaction() as conn:
            await runs.create_run(conn, ready_run(), at=T0)
            raise RuntimeError("the transaction fails after writing the wake-up")
    assert intake.stats.eager == 0 and handled == []


async def test_a_rolled_back_transaction_gives_back_the_slot_it_took(db: Database) -> None:
    # Given an intake with one slot and a transaction that took it, then rolled back
    handled: list[str] = []
    intake = intake_running(db, handled, size=1)
    with intake.eager(db):
        with pytest.raises(RuntimeError):
            async with db.transaction() as conn:
                await runs.create_run(conn, ready_run(), at=T0)
                raise RuntimeError("the transaction fails after writing the wake-up")
        # When the next commit readies a step
        run_id, _ = await create_ready_run(db)
        # Then the slot is free for it
        await eventually(lambda: handled == [run_id] and not intake._running, timeout=10)
    assert intake.stats.unpublished == 1 and intake._busy == 0
    await intake.drain()


async def test_a_full_intake_queues_the_step_claimed_in_its_transaction(db: Database) -> None:
    # Given an intake with one slot, held by a step that has not finished
    handled: list[str] = []
    gate = asyncio.Event()
    intake = intake_running(db, handled, size=1, gate=gate)
    with intake.eager(db):
        first, _ = await create_ready_run(db)
        await eventually(lambda: handled == [first], timeout=10)
        # When two more commits ready a step each
        second, _ = await create_ready_run(db)
        third, _ = await create_ready_run(db)
        # Then both are claimed in their transactions and wait here, not for the broker
        assert handled == [first] and intake.stats.queued == 2 and intake.stats.eager_skipped == 0
        assert await step_state(db, second) == StepState.RUNNING and await relayed(db) == {}
        # ... and run, in order, as the slot frees
        gate.set()
        await eventually(lambda: handled == [first, second, third] and not intake._running, timeout=10)
    assert intake.stats.unpublished == 3 and intake._busy == 0 and intake._queued == 0
    assert await step_state(db, third) == StepState.DONE
    await intake.drain()


async def test_a_queued_step_whose_lease_ran_out_is_left_to_the_scanner(db: Database) -> None:
    # Given a full intake with a step queued behind the one running
    handled: list[str] = []
    gate = asyncio.Event()
    clock = FrozenClock(T0)
    intake = intake_running(db, handled, size=1, gate=gate, clock=clock)
    with intake.eager(db):
        first, _ = await create_ready_run(db)
        await eventually(lambda: handled == [first], timeout=10)
        second, _ = await create_ready_run(db)
        # When its lease runs out before the slot frees
        clock.advance(intake.dispatcher.lease + timedelta(seconds=1))
        gate.set()
        await eventually(lambda: not intake._running, timeout=10)
    # Then it is not started here (another process may hold it by now); the scanner wakes it
    assert handled == [first] and intake.stats.expired_in_queue == 1 and intake._queued == 0
    scanner = Scanner(db=db, clock=clock, environment="prod", quiet=timedelta(seconds=10))
    await scanner.scan_once()
    assert [w.payload["run_id"] for w in (await relayed(db))["metrics"]] == [second]
    await intake.drain()


async def test_a_full_intake_with_a_full_backlog_leaves_the_step_to_the_broker(db: Database) -> None:
    # Given an intake with one slot, held by a step that has not finished, and no backlog
    handled: list[str] = []
    gate = asyncio.Event()
    intake = intake_running(db, handled, size=1, gate=gate, backlog=0)
    with intake.eager(db):
        first, _ = await create_ready_run(db)
        await eventually(lambda: handled == [first], timeout=10)
        # When another commit readies a step
        second, wakeup = await create_ready_run(db)
    # Then it is not taken eagerly (the eager door never waits) ...
    assert intake.stats.eager_skipped == 1 and handled == [first]
    # ... its wake-up goes to the broker, for any process of the role ...
    assert [w.message_id for w in (await relayed(db))["metrics"]] == [wakeup.message_id]
    # ... and the broker's copy runs it once a slot is free
    gate.set()
    await intake.wakeup(wakeup)
    await eventually(lambda: handled == [first, second], timeout=10)
    await eventually(lambda: intake.stats.relayed == 1, timeout=10)
    await intake.drain(grace=timedelta(seconds=5))
    assert await step_state(db, second) == StepState.DONE


async def test_a_drained_intake_takes_no_more_steps(db: Database) -> None:
    handled: list[str] = []
    intake = intake_running(db, handled)
    with intake.eager(db):
        await intake.drain()
        run_id, wakeup = await create_ready_run(db)
        await intake.wakeup(wakeup)
    assert handled == [] and await step_state(db, run_id) == StepState.READY


@pytest.mark.postgres
@pytest.mark.parametrize("db", [pytest.param("postgresql", marks=pytest.mark.postgres)], indirect=True)
async def test_a_transaction_cancelled_mid_statement_stays_cancelled(db: Database) -> None:
    # Given a listener, so the transaction tracks what it writes
    started = asyncio.Event()

    async def slow() -> None:
        async with db.transaction() as conn:
            started.set()
            await conn.execute(text("SELECT pg_sleep(30)"))

    with db.listening(lambda _messages: None):
        task = asyncio.create_task(slow())
        await started.wait()
        await asyncio.sleep(0.2)  # let the statement reach the server (nothing to wait on from outside)
        # When the task is cancelled while the statement runs (a drain, a lost lease)
        task.cancel()
        # Then it ends cancelled, not with an error about the invalidated connection
        with pytest.raises(asyncio.CancelledError):
            await task


async def finish_step(db: Database, ctx: StepContext) -> None:
    """Commit the claimed step DONE, fenced (readies what waits for it)."""
    c = ctx.claim
    async with db.transaction() as conn:
        run = await runs.get_run(conn, c.tenant_id, c.run_id)
        await runs.commit(conn, RunCommit(
            tenant_id=c.tenant_id, run_id=c.run_id, expected_version=run.state_version,
            fence=Fence(step_id=c.step_id, owner_epoch=c.owner_epoch),
            steps=(StepChange(step_id=c.step_id, state=StepState.DONE),)), at=T0)


def chain_intake(db: Database, finished: list[str], *, size: int) -> StepIntake:
    """An intake for a run's ``metrics`` and ``join`` steps whose handler finishes each (readying
    what waits for it) and records its step id in ``finished``."""

    async def handler(ctx: StepContext) -> None:
        await finish_step(db, ctx)
        finished.append(ctx.claim.step_id)

    return StepIntake(StepDispatcher(db=db, clock=FrozenClock(T0), handlers={"metrics": handler, "join": handler},
                                     owner="w1"), size)


async def test_a_chain_of_eager_steps_costs_one_write_transaction_per_step(
        db: Database, monkeypatch: pytest.MonkeyPatch) -> None:
    # Given an intake for both steps of a run (metrics, then join)
    finished: list[str] = []
    intake = chain_intake(db, finished, size=4)
    begun = counting_transactions(db, monkeypatch)
    with intake.eager(db):
        # When the run is created and runs to its end
        run_id, _ = await create_ready_run(db)
        await eventually(lambda: finished == ["metrics", "join"] and not intake._running, timeout=10)
    # Then each commit claimed the step it readied and ended the attempt it finished:
    # creation, the metrics step's commit, the join step's commit, and nothing else
    assert len(begun) == 3
    assert intake.dispatcher.stats.claimed == 2 and intake.stats.unpublished == 2
    async with db.reader() as conn:
        ended = (await conn.execute(select(func.count()).select_from(attempts).where(
            attempts.c.run_id == run_id, attempts.c.outcome == "finished"))).scalar()
    assert ended == 2 and await relayed(db) == {}


async def test_a_step_a_commit_readies_for_this_process_is_claimed_by_its_compare_and_set(db: Database) -> None:
    # Given an intake for both steps of a run, its join handler held at a gate
    handled: list[str] = []
    gate = asyncio.Event()

    async def metrics(ctx: StepContext) -> None:
        await finish_step(db, ctx)

    async def join(ctx: StepContext) -> None:
        handled.append(ctx.claim.step_id)
        await gate.wait()
        await finish_step(db, ctx)

    intake = StepIntake(StepDispatcher(db=db, clock=FrozenClock(T0), handlers={"metrics": metrics, "join": join},
                                       owner="w1"), 4)
    with intake.eager(db), statements(db) as executed:
        # When the metrics step's commit readies the join
        run_id, _ = await create_ready_run(db)
        await eventually(lambda: handled == ["join"], timeout=10)
        # Then the join is RUNNING under this process's lease, epoch 1, its attempt started,
        # and its handler holds that claim
        await assert_claimed_by_w1(db, intake, run_id, "join")
        gate.set()
        await eventually(lambda: not intake._running, timeout=10)
    assert await step_state(db, run_id) == StepState.DONE
    async with db.reader() as conn:
        assert (await steps.get_step(conn, "acme", run_id, "join")).state == StepState.DONE
    assert intake.dispatcher.stats.claimed == 2 and intake.stats.unpublished == 2 and await relayed(db) == {}
    assert await woken_in_outbox(db, run_id) == []  # both wake-ups taken: no outbox row for either
    # and on PostgreSQL the claim took no statement of its own: the compare-and-set that readied
    # the join claimed it (SQLite claims it right after, in the same transaction)
    claims = [s for s in executed if s.startswith("WITH claimed AS (UPDATE steps")
              or s.startswith("UPDATE steps") and "owner_epoch=(steps.owner_epoch +" in s]
    assert len(claims) == (0 if db.dialect == "postgresql" else 1), claims


async def test_a_step_readied_by_a_commit_that_parks_its_run_is_not_claimed(db: Database) -> None:
    # Given an intake for the join step of a run whose metrics step is claimed
    handled: list[str] = []
    intake = StepIntake(StepDispatcher(db=db, clock=FrozenClock(T0),
                                       handlers={"join": lambda ctx: _record(ctx, handled)}, owner="w1"), 4)
    async with db.transaction() as conn:
        run, _ = await runs.create_run(conn, ready_run().model_copy(update={"state": RunState.RUNNING}), at=T0)
    run_id = run.run_id
    async with db.transaction() as conn:
        claim = await steps.claim_step(conn, "acme", run_id, "metrics", owner="w0", lease=timedelta(seconds=30), now=T0)
    assert claim is not None
    with intake.eager(db):
        # When the metrics step's commit readies the join and pauses the run in the same commit
        async with db.transaction() as conn:
            run = await runs.get_run(conn, "acme", run_id)
            await runs.commit(conn, RunCommit(
                tenant_id="acme", run_id=run_id, expected_version=run.state_version, state=RunState.PAUSED,
                fence=Fence(step_id="metrics", owner_epoch=claim.owner_epoch),
                steps=(StepChange(step_id="metrics", state=StepState.DONE),)), at=T0)
        await eventually(lambda: not intake._running and not intake._taken, timeout=10)
    # Then the join is READY, unclaimed (a paused run hands out no work), and nothing ran it
    async with db.reader() as conn:
        step = await steps.get_step(conn, "acme", run_id, "join")
    assert (step.state, step.owner, step.owner_epoch, step.lease_until) == (StepState.READY, None, 0, None)
    assert handled == [] and intake.dispatcher.stats.claimed == 0
    assert intake.dispatcher.stats.not_claimable == 1


async def _record(ctx: StepContext, handled: list[str]) -> None:
    handled.append(ctx.claim.step_id)


async def test_a_full_intake_goes_on_with_a_run_in_the_slot_its_finishing_step_frees(db: Database) -> None:
    # Given an intake with one slot for both steps of a run (metrics, then join)
    finished: list[str] = []
    intake = chain_intake(db, finished, size=1)
    with intake.eager(db):
        # When the run is created and its metrics step's finishing commit readies the join
        # while metrics still holds the only slot
        await create_ready_run(db)
        await eventually(lambda: finished == ["metrics", "join"] and not intake._running, timeout=10)
    # Then the join was taken in that commit (its wake-up never published), not left to the broker
    assert intake.stats.unpublished == 2 and intake.stats.eager_skipped == 0
    assert await relayed(db) == {} and intake._busy == 0


class DiesAfterCommit(StepIntake):
    """A process that claimed a step in the commit that readied it, and died right after."""

    def committed(self, messages: Sequence[OutboxMessage]) -> None:
        pass


async def test_a_step_claimed_in_a_commit_whose_process_died_is_woken_after_its_lease(db: Database) -> None:
    # Given a step claimed in the transaction that readied it (a new run's: inserted claimed),
    # by a process that then died
    dead = intake_running(db, [], intake=DiesAfterCommit)
    with dead.eager(db):
        run_id, _ = await create_ready_run(db)
    assert await step_state(db, run_id) == StepState.RUNNING and await relayed(db) == {}
    # When the scanner passes: not while the dead process's lease lasts, then once it expired
    clock = FrozenClock(T0)
    scanner = Scanner(db=db, clock=clock, environment="prod", quiet=timedelta(seconds=10))
    clock.advance(timedelta(seconds=11))
    assert (await scanner.scan_once()).woken == 0
    clock.advance(timedelta(seconds=20))
    assert (await scanner.scan_once()).woken == 1
    # Then its wake-up goes to the broker, and a live process takes the step over (epoch 2)
    [again] = (await relayed(db))["metrics"]
    handled: list[str] = []
    live = intake_running(db, handled, clock=clock)
    await live.wakeup(again)
    await eventually(lambda: handled == [run_id] and not live._running, timeout=10)
    assert await step_state(db, run_id) == StepState.DONE
    async with db.reader() as conn:
        assert (await steps.get_step(conn, "acme", run_id, "metrics")).owner_epoch == 2
