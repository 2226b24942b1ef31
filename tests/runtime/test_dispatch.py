"""Step dispatch: one handler run per claim, retries bounded, a lost lease stops the work."""

from __future__ import annotations

import asyncio
import contextlib
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import select, text

from ira.core.clock import FrozenClock
from ira.core.commit import EventDraft, Fence, RunCommit, StepChange
from ira.core.events import RunEventType
from ira.core.states import StepState
from ira.runtime.dispatch import StepContext, StepDispatcher
from ira.runtime.store import known_plans, runs, steps
from ira.runtime.store.database import Database
from ira.runtime.store.schema import attempts
from ira.runtime.store.schema import runs as runs_table
from ira.runtime.wakeup import step_wakeup
from tests.contracts.test_store import T0, new_run
from tests.store_fixtures import until_blocked_by


async def setup_run(db: Database) -> str:
    async with db.transaction() as conn:
        run, _ = await runs.create_run(conn, new_run(), at=T0)
    return run.run_id


def wake(run_id: str, kind: str = "metrics"):  # type: ignore[no-untyped-def]
    return step_wakeup("acme", run_id, "metrics", kind=kind, environment="prod", at=T0).envelope


async def finish(db: Database, ctx: StepContext) -> None:
    """What a well-behaved handler does: commit DONE, fenced by its claim."""
    async with db.transaction() as conn:
        run = await runs.get_run(conn, ctx.claim.tenant_id, ctx.claim.run_id)
        await runs.commit(conn, RunCommit(
            tenant_id="acme", run_id=run.run_id, expected_version=run.state_version,
            fence=Fence(step_id="metrics", owner_epoch=ctx.claim.owner_epoch),
            steps=(StepChange(step_id="metrics", state=StepState.DONE),),
            events=(EventDraft(type=RunEventType.AGENT_TURN),)), at=T0)


async def step_state(db: Database, run_id: str) -> StepState:
    async with db.reader() as conn:
        return (await steps.get_step(conn, "acme", run_id, "metrics")).state


async def test_duplicate_wakeups_run_the_handler_once(db: Database) -> None:
    run_id = await setup_run(db)
    calls: list[int] = []

    async def handler(ctx: StepContext) -> None:
        calls.append(ctx.claim.owner_epoch)
        await finish(db, ctx)

    dispatcher = StepDispatcher(db=db, clock=FrozenClock(T0), handlers={"metrics": handler}, owner="w1")
    for _ in range(3):
        await dispatcher.handle_wakeup(wake(run_id))
    assert calls == [1]
    assert (dispatcher.stats.claimed, dispatcher.stats.not_claimable) == (1, 2)
    assert await step_state(db, run_id) == StepState.DONE


async def test_wakeups_for_other_kinds_are_not_claimed(db: Database) -> None:
    run_id = await setup_run(db)
    dispatcher = StepDispatcher(db=db, clock=FrozenClock(T0), handlers={"logs": finish_never}, owner="w1")
    await dispatcher.handle_wakeup(wake(run_id))
    assert await step_state(db, run_id) == StepState.READY


async def finish_never(ctx: StepContext) -> None:
    await asyncio.Event().wait()


async def test_a_failing_handler_is_retried_then_the_step_fails(db: Database) -> None:
    run_id = await setup_run(db)

    async def broken(ctx: StepContext) -> None:
        raise RuntimeError("prometheus exploded")

    dispatcher = StepDispatcher(db=db, clock=FrozenClock(T0), handlers={"metrics": broken}, owner="w", max_attempts=2)
    await dispatcher.handle_wakeup(wake(run_id))
    assert await step_state(db, run_id) == StepState.READY  # released for a retry
    await dispatcher.handle_wakeup(wake(run_id))
    assert await step_state(db, run_id) == StepState.FAILED
    async with db.reader() as conn:
        failed = [e for e in await runs.list_events(conn, "acme", run_id) if e.type == "STEP_FAILED"]
    assert failed and "prometheus exploded" in failed[0].data["error"]


async def test_a_step_fails_even_when_the_run_moves_as_it_fails(db: Database) -> None:
    """PostgreSQL: a writer holding the run (it moves it: a new version) while the step's last
    attempt fails. The failure decides on nothing of the run, so it waits for that writer and
    applies; read first, it was refused by the version that moved (the step stayed RUNNING)."""
    if db.engine.dialect.name != "postgresql":
        pytest.skip("SQLite's one writer orders every transaction")
    run_id = await setup_run(db)

    async def broken(ctx: StepContext) -> None:
        raise RuntimeError("prometheus exploded")

    dispatcher = StepDispatcher(db=db, clock=FrozenClock(T0), handlers={"metrics": broken}, owner="w", max_attempts=1)
    known_plans.forget_all()  # a run another process created (a known plan's commits wait in-process: known_plans)
    async with db.transaction() as holder:  # a writer that holds the run and moves it
        await holder.execute(select(runs_table.c.run_id).where(runs_table.c.run_id == run_id).with_for_update())
        run = await runs.get_run(holder, "acme", run_id)
        await runs.commit(holder, RunCommit(tenant_id="acme", run_id=run_id, expected_version=run.state_version,
                                            events=(EventDraft(type=RunEventType.AGENT_TURN),)), at=T0)
        holder_pid = (await holder.execute(text("SELECT pg_backend_pid()"))).scalar_one()
        failing = asyncio.create_task(dispatcher.handle_wakeup(wake(run_id)))
        await until_blocked_by(db, holder_pid, "the step's failure")
    await asyncio.wait_for(failing, timeout=10)
    assert await step_state(db, run_id) == StepState.FAILED
    assert dispatcher.stats.failed == 1 and dispatcher.stats.lost_lease == 0


async def test_a_handler_that_loses_its_lease_is_cancelled(db: Database) -> None:
    run_id = await setup_run(db)
    started, cancelled = asyncio.Event(), asyncio.Event()

    async def slow(ctx: StepContext) -> None:
        started.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled.set()
            raise

    dispatcher = StepDispatcher(db=db, clock=FrozenClock(T0), handlers={"metrics": slow}, owner="old",
                                lease=timedelta(milliseconds=300))
    work = asyncio.create_task(dispatcher.handle_wakeup(wake(run_id)))
    await asyncio.wait_for(started.wait(), timeout=5)
    later = datetime(2026, 4, 29, 11, 0, tzinfo=UTC)  # long after the old lease ran out
    async with db.transaction() as conn:
        taken = await steps.claim_step(conn, "acme", run_id, "metrics", owner="new", lease=timedelta(hours=1),
                                       now=later)
    assert taken is not None and taken.owner_epoch == 2
    await asyncio.wait_for(work, timeout=5)
    assert cancelled.is_set() and dispatcher.stats.lost_lease == 1


async def test_a_lost_lease_leaves_the_calling_task_running(db: Database) -> None:
    """The handler runs in its caller's task (a slot of the intake, a consumer): the lease's
    cancellation is taken back once the handler stopped, so the caller goes on uncancelled."""
    run_id = await setup_run(db)
    started = asyncio.Event()

    async def slow(ctx: StepContext) -> None:
        started.set()
        await asyncio.Event().wait()

    dispatcher = StepDispatcher(db=db, clock=FrozenClock(T0), handlers={"metrics": slow}, owner="old",
                                lease=timedelta(milliseconds=300))

    async def caller() -> int:
        await dispatcher.handle_wakeup(wake(run_id))
        await asyncio.sleep(0)  # a pending cancellation would land here
        task = asyncio.current_task()
        assert task is not None
        return task.cancelling()

    work = asyncio.create_task(caller())
    await asyncio.wait_for(started.wait(), timeout=5)
    async with db.transaction() as conn:
        assert await steps.claim_step(conn, "acme", run_id, "metrics", owner="new", lease=timedelta(hours=1),
                                      now=datetime(2026, 4, 29, 11, 0, tzinfo=UTC)) is not None
    assert await asyncio.wait_for(work, timeout=5) == 0
    assert dispatcher.stats.lost_lease == 1


async def test_a_shutdown_still_cancels_a_running_handler(db: Database) -> None:
    run_id = await setup_run(db)
    started = asyncio.Event()

    async def slow(ctx: StepContext) -> None:
        started.set()
        await asyncio.Event().wait()

    dispatcher = StepDispatcher(db=db, clock=FrozenClock(T0), handlers={"metrics": slow}, owner="w")
    work = asyncio.create_task(dispatcher.handle_wakeup(wake(run_id)))
    await asyncio.wait_for(started.wait(), timeout=5)
    work.cancel()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(work, timeout=5)
    assert dispatcher.stats.lost_lease == 0


def counting_transactions(db: Database, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Count the write transactions ``db`` begins from now on (one element per transaction)."""
    begun: list[int] = []
    begin = db._begin

    def counted():  # type: ignore[no-untyped-def]
        begun.append(1)
        return begin()

    monkeypatch.setattr(db, "_begin", counted)
    return begun


async def attempt_rows(db: Database, run_id: str) -> list[tuple[str | None, bool]]:
    async with db.reader() as conn:
        rows = await conn.execute(select(attempts.c.outcome, attempts.c.ended_at).where(attempts.c.run_id == run_id))
        return [(r.outcome, r.ended_at is not None) for r in rows]


async def test_a_step_its_handler_finished_costs_two_write_transactions(
        db: Database, monkeypatch: pytest.MonkeyPatch) -> None:
    # Given a handler whose fenced commit finishes its step
    run_id = await setup_run(db)

    async def handler(ctx: StepContext) -> None:
        await finish(db, ctx)

    dispatcher = StepDispatcher(db=db, clock=FrozenClock(T0), handlers={"metrics": handler}, owner="w1")
    begun = counting_transactions(db, monkeypatch)
    # When it runs
    await dispatcher.handle_wakeup(wake(run_id))
    # Then the claim and that commit are all it writes: the commit ended the attempt too
    assert len(begun) == 2
    assert await step_state(db, run_id) == StepState.DONE
    assert await attempt_rows(db, run_id) == [("finished", True)]


async def test_a_handler_whose_finishing_commit_rolled_back_is_released(db: Database) -> None:
    # Given a handler whose finishing commit rolls back, and which returns anyway
    run_id = await setup_run(db)

    async def handler(ctx: StepContext) -> None:
        with contextlib.suppress(RuntimeError):
            async with db.transaction() as conn:
                run = await runs.get_run(conn, "acme", run_id)
                await runs.commit(conn, RunCommit(
                    tenant_id="acme", run_id=run_id, expected_version=run.state_version,
                    fence=Fence(step_id="metrics", owner_epoch=ctx.claim.owner_epoch),
                    steps=(StepChange(step_id="metrics", state=StepState.DONE),)), at=T0)
                raise RuntimeError("the transaction fails after the commit's statements")

    dispatcher = StepDispatcher(db=db, clock=FrozenClock(T0), handlers={"metrics": handler}, owner="w1")
    await dispatcher.handle_wakeup(wake(run_id))
    # Then the step is released for another try, as for any handler that left it RUNNING
    assert await step_state(db, run_id) == StepState.READY
    assert await attempt_rows(db, run_id) == [("released", True)]
