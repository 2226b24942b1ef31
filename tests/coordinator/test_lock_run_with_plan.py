"""``facts.lock_run_with_plan``: the run under lock and its steps, in one statement on PostgreSQL,
never a plan older than the run it locked."""

from __future__ import annotations

import asyncio

import pytest
from sqlalchemy import text

from ira.coordinator.facts import lock_run, lock_run_with_plan
from ira.core.commit import RunCommit, StepChange
from ira.core.errors import NotFoundError
from ira.core.states import StepState
from ira.runtime.store import runs
from ira.runtime.store.database import Database
from tests.contracts.test_store import T0, create
from tests.store_fixtures import until_blocked_by


async def test_the_run_and_its_steps_as_the_separate_reads_give_them(db: Database) -> None:
    run = await create(db)
    async with db.transaction() as conn:
        locked, plan = await lock_run_with_plan(conn, "acme", run.run_id)
    assert (locked.run_id, locked.state_version, locked.state) == (run.run_id, run.state_version, run.state)
    assert [(s.step_id, s.state, s.depends_on) for s in plan] == [
        ("join", StepState.BLOCKED, ("metrics",)), ("metrics", StepState.READY, ())]
    with pytest.raises(NotFoundError):
        async with db.transaction() as conn:
            await lock_run_with_plan(conn, "acme", "run_missing")


async def test_a_commit_it_waited_for_is_in_the_plan_it_returns(db: Database) -> None:
    """The statement's steps are as of its start; a commit of the run that held the lock and
    committed while it waited (a step finished) must be in what it returns."""
    if db.engine.dialect.name != "postgresql":
        pytest.skip("SQLite has one writer: nothing commits while a writer waits")
    run = await create(db)
    async with db.transaction() as holder:
        await lock_run(holder, "acme", run.run_id)
        holder_pid = (await holder.execute(text("SELECT pg_backend_pid()"))).scalar_one()

        async def join() -> list[tuple[str, StepState]]:
            async with db.transaction() as conn:
                _, plan = await lock_run_with_plan(conn, "acme", run.run_id)
            return [(s.step_id, s.state) for s in plan]

        waiting = asyncio.create_task(join())
        await until_blocked_by(db, holder_pid, "the join's lock")
        await runs.commit(holder, RunCommit(tenant_id="acme", run_id=run.run_id, expected_version=run.state_version,
                                            steps=(StepChange(step_id="metrics", state=StepState.SKIPPED),)), at=T0)
    plan = await asyncio.wait_for(waiting, timeout=10)
    assert dict(plan) == {"metrics": StepState.SKIPPED, "join": StepState.READY}
