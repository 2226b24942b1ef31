"""Step intake: a step this process's commit readied starts right after the commit (eager
dispatch), the broker's later copy of its wake-up is dropped, and the outbox row stays."""

from __future__ import annotations

import asyncio
from datetime import timedelta

import pytest
from sqlalchemy import func, select, text

from ira.core.clock import FrozenClock
from ira.core.commit import NewRun
from ira.core.envelope import Envelope
from ira.core.states import StepState
from ira.runtime.dispatch import StepContext, StepDispatcher
from ira.runtime.intake import StepIntake
from ira.runtime.store import runs
from ira.runtime.store.database import Database
from ira.runtime.store.schema import outbox
from ira.runtime.wakeup import step_wakeup
from tests.contracts.test_store import T0, new_run
from tests.eventually import eventually
from tests.runtime.test_dispatch import finish, step_state


def intake_running(db: Database, handled: list[str], *, size: int = 4, gate: asyncio.Event | None = None
                   ) -> StepIntake:
    """An intake for ``metrics`` steps whose handler records the run, waits for ``gate``, then finishes."""

    async def handler(ctx: StepContext) -> None:
        handled.append(ctx.claim.run_id)
        if gate is not None:
            await gate.wait()
        await finish(db, ctx)

    return StepIntake(StepDispatcher(db=db, clock=FrozenClock(T0), handlers={"metrics": handler}, owner="w1"), size)


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
    # and the outbox still holds the wake-up for other processes
    assert await is_unsent(db, wakeup)
    assert (intake.stats.eager, intake.stats.relayed) == (1, 0)
    await intake.drain()


async def test_the_brokers_copy_of_an_eager_wakeup_is_dropped_without_a_claim(db: Database) -> None:
    handled: list[str] = []
    intake = intake_running(db, handled)
    with intake.eager(db):
        run_id, wakeup = await create_ready_run(db)
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


async def test_a_full_intake_leaves_the_step_to_the_broker(db: Database) -> None:
    # Given an intake with one slot, held by a step that has not finished
    handled: list[str] = []
    gate = asyncio.Event()
    intake = intake_running(db, handled, size=1, gate=gate)
    with intake.eager(db):
        first, _ = await create_ready_run(db)
        await eventually(lambda: handled == [first], timeout=10)
        # When another commit readies a step
        second, wakeup = await create_ready_run(db)
    # Then it is not taken eagerly (the eager door never waits) ...
    assert intake.stats.eager_skipped == 1 and handled == [first]
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
