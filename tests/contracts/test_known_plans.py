"""A step finished on the plan this process knows (``known_plans``): one statement on PostgreSQL,
and the same run, steps, events and wake-ups as the usual way, whatever moved the run meanwhile
(another process's commit, a rolled-back transaction, siblings finishing at once). SQLite takes
the usual way: the outcomes are checked on both."""

from __future__ import annotations

import asyncio
from datetime import timedelta

import pytest
from sqlalchemy import select, text

from ira.core.commit import EventDraft, Fence, NewRun, NewStep, RunCommit, StepChange
from ira.core.envelope import Envelope
from ira.core.errors import StaleEpochError
from ira.core.events import RunEventType
from ira.core.ids import new_id
from ira.core.run import Claim
from ira.core.states import StepState
from ira.runtime.store import known_plans, runs, steps
from ira.runtime.store.database import Database
from ira.runtime.store.schema import outbox
from tests.contracts.test_store import T0
from tests.store_fixtures import statements, until_blocked_by

BRANCHES = ("logs", "metrics", "traces")


async def _fan_out(db: Database) -> str:
    run_id = new_id("run")
    new = NewRun(tenant_id="acme", run_id=run_id, task_id=new_id("task"), task_kind="diagnose",
                 subject_ref="incident:i1", workflow="incident-diagnosis@1",
                 steps=(*(NewStep(step_id=b, kind=b, state=StepState.READY) for b in BRANCHES),
                        NewStep(step_id="join", kind="join", state=StepState.BLOCKED, depends_on=BRANCHES)))
    async with db.transaction() as conn:
        await runs.create_run(conn, new, at=T0)
    return run_id


async def _claim(db: Database, run_id: str, step_id: str) -> Claim:
    async with db.transaction() as conn:
        claim = await steps.claim_step(conn, "acme", run_id, step_id, owner="w", lease=timedelta(minutes=5), now=T0)
    assert claim is not None
    return claim


def _finished(claim: Claim) -> RunCommit:
    """A branch's result: no expected version, fenced, its step DONE (as agents/handler.py commits)."""
    return RunCommit(tenant_id="acme", run_id=claim.run_id, expected_version=None,
                     fence=Fence(step_id=claim.step_id, owner_epoch=claim.owner_epoch),
                     steps=(StepChange(step_id=claim.step_id, state=StepState.DONE, result_ref=f"r:{claim.step_id}"),),
                     events=(EventDraft(type=RunEventType.BRANCH_FINISHED, data={"step_id": claim.step_id}),))


async def _finish(db: Database, claim: Claim) -> None:
    async with db.transaction() as conn:
        await runs.commit(conn, _finished(claim), at=T0)


async def _outcome(db: Database, run_id: str) -> tuple[dict[str, StepState], list[str], list[str]]:
    """Step states, the log's event types, and the steps the outbox wakes."""
    async with db.reader() as conn:
        plan = {s.step_id: s.state for s in await steps.list_steps(conn, "acme", run_id)}
        log = [e.type for e in await runs.list_events(conn, "acme", run_id)]
        woken = [Envelope.from_bytes(r.value).payload.get("step_id")
                 for r in (await conn.execute(select(outbox.c.value).where(outbox.c.key == f"acme:{run_id}"))).all()]
    return plan, log, [w for w in woken if w]


@pytest.fixture(autouse=True)
def _nothing_known():  # type: ignore[no-untyped-def]
    known_plans.forget_all()
    yield
    known_plans.forget_all()


async def test_a_step_finished_on_a_known_plan_is_one_statement(db: Database) -> None:
    # Given a run this process created, its branches claimed
    run_id = await _fan_out(db)
    claims = [await _claim(db, run_id, b) for b in BRANCHES]
    # When the branches finish one after the other
    with statements(db) as seen:
        for claim in claims:
            await _finish(db, claim)
    # Then the last one readied the join, once, with its event and wake-up
    plan, log, woken = await _outcome(db, run_id)
    assert plan == {**dict.fromkeys(BRANCHES, StepState.DONE), "join": StepState.READY}
    assert log.count("STEP_READY") == 1 and log[-1] == "STEP_READY" and woken.count("join") == 1
    # And on PostgreSQL each finish was one statement: the compare-and-set with the step's UPDATE
    if db.engine.dialect.name == "postgresql":
        writes = [s for s in seen if "UPDATE runs" in s or "UPDATE steps" in s]
        assert len(writes) == 3 and all("UPDATE runs" in s and "UPDATE steps" in s for s in writes)


async def test_a_commit_made_elsewhere_is_found_and_the_plan_read_again(db: Database) -> None:
    # Given a run this process knows, two of its branches finished by another process
    run_id = await _fan_out(db)
    claims = {b: await _claim(db, run_id, b) for b in BRANCHES}
    async with db.engine.begin() as elsewhere:  # no Database.transaction: this process learns nothing of it
        for b in ("logs", "traces"):
            await runs.commit(elsewhere, _finished(claims[b]), at=T0)
    # When the last branch finishes here, on the plan this process still holds
    await _finish(db, claims["metrics"])
    # Then it readied the join all the same: the stale plan's compare-and-set wrote nothing
    plan, log, woken = await _outcome(db, run_id)
    assert plan["join"] == StepState.READY and log.count("STEP_READY") == 1 and woken == ["join"]
    assert log.count("BRANCH_FINISHED") == 3


async def test_a_rolled_back_commit_leaves_the_plan_as_it_was(db: Database) -> None:
    # Given a run this process knows, and a branch's commit that rolls back after it was written
    run_id = await _fan_out(db)
    claims = {b: await _claim(db, run_id, b) for b in BRANCHES}
    with pytest.raises(RuntimeError):
        async with db.transaction() as conn:
            await runs.commit(conn, _finished(claims["logs"]), at=T0)
            raise RuntimeError("the handler failed after its commit")
    # When the other two finish, and the rolled-back one again
    for b in ("metrics", "traces", "logs"):
        await _finish(db, claims[b])
    # Then the join was readied by the last of them, not before
    plan, log, _ = await _outcome(db, run_id)
    assert plan == {**dict.fromkeys(BRANCHES, StepState.DONE), "join": StepState.READY}
    assert log[-2:] == ["BRANCH_FINISHED", "STEP_READY"] and log.count("STEP_READY") == 1


async def test_branches_finishing_at_once_ready_the_join_once(db: Database) -> None:
    # Given a run this process knows, its three branches claimed
    run_id = await _fan_out(db)
    claims = [await _claim(db, run_id, b) for b in BRANCHES]
    # When they finish at the same moment
    with statements(db) as seen:
        await asyncio.gather(*(_finish(db, c) for c in claims))
    # Then the join is ready, readied once
    plan, log, woken = await _outcome(db, run_id)
    assert plan["join"] == StepState.READY and log.count("STEP_READY") == 1 and woken == ["join"]
    assert sorted(log).count("BRANCH_FINISHED") == 3
    # And on PostgreSQL each waited for the one before it in this process, then finished in one
    # statement on the plan it left (none waited for the run's row only to be refused)
    if db.engine.dialect.name == "postgresql":
        writes = [s for s in seen if "UPDATE runs" in s or "UPDATE steps" in s]
        assert len(writes) == 3 and all("UPDATE runs" in s and "UPDATE steps" in s for s in writes)


async def test_a_transaction_holding_the_run_does_not_wait_for_one_that_waits_for_it(db: Database) -> None:
    """A transaction that took the plan and sent its statement waits for the run's row; one that
    holds that row must not wait for it to end (a deadlock no database would see)."""
    if db.engine.dialect.name != "postgresql":
        pytest.skip("SQLite has one writer: no row locks")
    run_id = await _fan_out(db)
    claims = {b: await _claim(db, run_id, b) for b in BRANCHES}
    async with db.transaction() as holder:
        await holder.execute(text("SELECT run_id FROM runs WHERE run_id = :r FOR UPDATE"), {"r": run_id})
        holder_pid = (await holder.execute(text("SELECT pg_backend_pid()"))).scalar_one()
        # Given a branch's commit that took the run's plan and waits for the row this one holds
        waiting = asyncio.create_task(_finish(db, claims["logs"]))
        await until_blocked_by(db, holder_pid, "the branch's commit")
        # When this one commits the run
        await asyncio.wait_for(runs.commit(holder, _finished(claims["metrics"]), at=T0), timeout=10)
    # Then both finish, the first the usual way on the run as this one left it
    await asyncio.wait_for(waiting, timeout=10)
    await _finish(db, claims["traces"])
    plan, log, woken = await _outcome(db, run_id)
    assert plan == {**dict.fromkeys(BRANCHES, StepState.DONE), "join": StepState.READY}
    assert log.count("STEP_READY") == 1 and woken == ["join"]


async def test_a_commit_waits_here_for_a_held_plan_only_so_long_then_at_the_runs_row(
        db: Database, monkeypatch: pytest.MonkeyPatch) -> None:
    """A transaction that took the plan and stays open (it waits for something else) holds the
    others' commits in this process only ``WAIT_LIMIT``; then they wait for the run's row, where
    the database sees the wait, and finish once it ends."""
    if db.engine.dialect.name != "postgresql":
        pytest.skip("plans are known on PostgreSQL only")
    monkeypatch.setattr(known_plans, "WAIT_LIMIT", 0.2)
    run_id = await _fan_out(db)
    claims = {b: await _claim(db, run_id, b) for b in BRANCHES}
    async with db.transaction() as holder:
        # Given a transaction that committed a branch on the known plan and has not ended
        await runs.commit(holder, _finished(claims["metrics"]), at=T0)
        holder_pid = (await holder.execute(text("SELECT pg_backend_pid()"))).scalar_one()
        # When another branch commits meanwhile
        waiting = asyncio.create_task(_finish(db, claims["logs"]))
        # Then, past the limit, its statement waits for the run's row the holder locked
        await until_blocked_by(db, holder_pid, "the branch's commit")
    # and it finishes once the holder ended, the join readied once by the last branch
    await asyncio.wait_for(waiting, timeout=10)
    await _finish(db, claims["traces"])
    plan, log, woken = await _outcome(db, run_id)
    assert plan == {**dict.fromkeys(BRANCHES, StepState.DONE), "join": StepState.READY}
    assert log.count("STEP_READY") == 1 and woken == ["join"]


async def test_a_stale_owner_on_a_known_plan_is_refused_and_writes_nothing(db: Database) -> None:
    # Given a branch whose claim was taken over (a new epoch)
    run_id = await _fan_out(db)
    old = await _claim(db, run_id, "logs")
    async with db.transaction() as conn:
        await steps.revoke_claim(conn, "acme", run_id, "logs", now=T0)
    # When the old owner commits its result
    with pytest.raises(StaleEpochError):
        await _finish(db, old)
    # Then nothing of it was written
    plan, log, _ = await _outcome(db, run_id)
    assert plan["logs"] == StepState.RUNNING and "BRANCH_FINISHED" not in log


async def test_a_step_taken_over_while_its_commit_waited_commits_nothing_even_if_the_error_is_caught(
        db: Database) -> None:
    """The compare-and-set checks the fence as the statement's snapshot holds it; a claim taken
    between that snapshot and the run's lock is found by the step's UPDATE after the compare-and-set
    wrote: the error is raised, and the transaction cannot commit what it wrote."""
    if db.engine.dialect.name != "postgresql":
        pytest.skip("SQLite has one writer: no commit waits for a row while a claim is taken")
    run_id = await _fan_out(db)
    claim = await _claim(db, run_id, "logs")
    async with db.engine.connect() as holder:
        await holder.execute(text("SELECT run_id FROM runs WHERE run_id = :r FOR UPDATE"), {"r": run_id})
        holder_pid = (await holder.execute(text("SELECT pg_backend_pid()"))).scalar_one()

        async def stale_commit() -> None:
            async with db.transaction() as conn:
                with pytest.raises(StaleEpochError):
                    await runs.commit(conn, _finished(claim), at=T0)
                # a caller that goes on as if nothing was written

        # When the branch's commit waits for the run's row and its step is taken over meanwhile
        waiting = asyncio.create_task(stale_commit())
        await until_blocked_by(db, holder_pid, "the branch's commit")
        async with db.transaction() as conn:
            await steps.revoke_claim(conn, "acme", run_id, "logs", now=T0)
        await holder.rollback()
    # Then the transaction refuses to commit, and nothing of the branch's result is in the run
    with pytest.raises(StaleEpochError):
        await asyncio.wait_for(waiting, timeout=10)
    plan, log, _ = await _outcome(db, run_id)
    assert plan["logs"] == StepState.RUNNING and "BRANCH_FINISHED" not in log
    async with db.reader() as conn:
        assert (await runs.get_run(conn, "acme", run_id)).state_version == 1
