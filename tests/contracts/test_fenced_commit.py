"""A fenced commit that finishes its own step checks the fence in that step's UPDATE: the same
refusals, in the same order, as the separate epoch lock it replaces, on every backend."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import timedelta

import pytest
from sqlalchemy import select, text
from sqlalchemy.ext.asyncio import AsyncConnection

from ira.core.commit import EventDraft, Fence, NewRun, NewStep, OutboxMessage, RunCommit, StepChange
from ira.core.errors import ConcurrentUpdateError, NotFoundError, StaleEpochError
from ira.core.events import RunEventType
from ira.core.ids import new_id
from ira.core.run import Claim
from ira.core.states import RunState, StepState
from ira.runtime.store import known_plans, runs, steps
from ira.runtime.store.database import Database
from ira.runtime.store.schema import attempts
from ira.runtime.store.schema import runs as runs_table
from ira.runtime.store.schema import steps as steps_table
from tests.contracts.test_store import LEASE, T0, _claim, create, event_seqs
from tests.store_fixtures import statements, until_blocked_by


def finishing(run_id: str, claim: Claim, *, version: int = 1, step_state: StepState | None = StepState.DONE
              ) -> RunCommit:
    changes = (StepChange(step_id="metrics", state=step_state),) if step_state else ()
    return RunCommit(tenant_id="acme", run_id=run_id, expected_version=version,
                     fence=Fence(step_id="metrics", owner_epoch=claim.owner_epoch), steps=changes,
                     events=(EventDraft(type=RunEventType.BRANCH_FINISHED),))


async def test_the_claim_returns_the_step_as_claimed(db: Database) -> None:
    run = await create(db)
    async with db.transaction() as conn:
        claimed = await steps.claim_step_as(conn, "acme", run.run_id, "metrics", owner="w", lease=LEASE, now=T0)
        assert claimed is not None
        claim, step = claimed
        assert step == await steps.get_step(conn, "acme", run.run_id, "metrics")
    assert (step.state, step.owner, step.owner_epoch, claim.owner_epoch) == (StepState.RUNNING, "w", 1, 1)


async def test_a_revoked_owner_cannot_finish_its_step_even_with_a_stale_version(db: Database) -> None:
    run = await create(db)
    claim = await _claim(db, run.run_id, "w", T0)
    assert claim is not None
    async with db.transaction() as conn:
        await steps.revoke_claim(conn, "acme", run.run_id, "metrics", now=T0)
        await runs.commit(conn, RunCommit(tenant_id="acme", run_id=run.run_id, expected_version=1,
                                          state=RunState.RUNNING), at=T0)
    for commit in (finishing(run.run_id, claim, version=2), finishing(run.run_id, claim, version=1),
                   finishing(run.run_id, claim, version=2, step_state=None)):
        with pytest.raises(StaleEpochError):  # the fence is refused first, as it always was
            async with db.transaction() as conn:
                await runs.commit(conn, commit, at=T0)
    async with db.reader() as conn:
        step = await steps.get_step(conn, "acme", run.run_id, "metrics")
    assert (step.state, step.owner_epoch) == (StepState.RUNNING, 2)
    assert await event_seqs(db, run.run_id) == [1]


async def test_a_fence_that_finishes_its_own_step_costs_no_read(db: Database) -> None:
    run = await create(db)
    claim = await _claim(db, run.run_id, "w", T0)
    assert claim is not None
    with statements(db) as seen:
        async with db.transaction() as conn:
            await runs.commit(conn, finishing(run.run_id, claim), at=T0)
    assert not [s for s in seen if s.lstrip().upper().startswith("SELECT steps.owner_epoch".upper())]
    async with db.reader() as conn:
        assert (await steps.get_step(conn, "acme", run.run_id, "metrics")).state == StepState.DONE


async def _finish(db: Database, run_id: str, claim: Claim) -> bool:
    try:
        async with db.transaction() as conn:
            await runs.commit(conn, finishing(run_id, claim), at=T0)
        return True
    except StaleEpochError:
        return False


async def test_a_takeover_racing_the_late_owners_commit_leaves_one_winner(db: Database) -> None:
    for _ in range(5):
        run = await create(db)
        old = await _claim(db, run.run_id, "old", T0)
        assert old is not None
        finished, taken = await asyncio.gather(
            _finish(db, run.run_id, old), _claim(db, run.run_id, "new", T0 + LEASE + timedelta(seconds=1)))
        async with db.reader() as conn:
            step = await steps.get_step(conn, "acme", run.run_id, "metrics")
        assert finished != (taken is not None)
        assert (step.state, step.owner_epoch) == ((StepState.DONE, 1) if finished else (StepState.RUNNING, 2))
        assert await event_seqs(db, run.run_id) == ([1, 2, 3] if finished else [1])  # 3: the join made ready


class _RunReader:
    """A listener that takes every wake-up and reads the run while its transaction writes it."""

    def __init__(self, db: Database) -> None:
        self.db, self.seen = db, []  # type: ignore[var-annotated]

    def take(self, message: OutboxMessage) -> str | None:
        return "reader"

    async def taken(self, conn: AsyncConnection, message: OutboxMessage) -> None:
        with statements(self.db) as executed:
            run = await runs.get_run(conn, message.envelope.tenant_id, message.envelope.payload["run_id"])
        self.seen.append((run, executed))

    def committed(self, messages: Sequence[OutboxMessage]) -> None: ...

    def abandoned(self, messages: Sequence[OutboxMessage]) -> None: ...


async def test_a_listener_reads_the_run_its_commit_wrote_without_a_statement(db: Database) -> None:
    run = await create(db)
    claim = await _claim(db, run.run_id, "w", T0)
    assert claim is not None
    reader = _RunReader(db)
    with db.listening(reader):
        async with db.transaction() as conn:
            committed = await runs.commit(conn, finishing(run.run_id, claim), at=T0)  # readies the join
    async with db.reader() as conn:
        stored = await runs.get_run(conn, "acme", run.run_id)
    assert [(seen, executed) for seen, executed in reader.seen] == [(committed, [])]
    assert committed == stored and committed.last_seq == 3


async def _ended_at(conn: AsyncConnection, claim: Claim) -> tuple[str | None, object]:
    row = (await conn.execute(select(attempts.c.outcome, attempts.c.ended_at).where(
        attempts.c.tenant_id == "acme", attempts.c.attempt_id == claim.attempt_id))).one()
    return row.outcome, row.ended_at


@contextmanager
def running(claim: Claim) -> Iterator[steps.RunningAttempt]:
    attempt = steps.RunningAttempt(claim)
    token = steps.RUNNING_ATTEMPT.set(attempt)
    try:
        yield attempt
    finally:
        steps.RUNNING_ATTEMPT.reset(token)


@pytest.mark.parametrize("plan_known", [True, False])
async def test_the_attempt_a_fenced_commit_finishes_ends_in_the_steps_update_on_postgresql(
        db: Database, plan_known: bool) -> None:
    run = await create(db)
    claim = await _claim(db, run.run_id, "w", T0)
    assert claim is not None
    if not plan_known:  # a run another process created, or one from before a restart
        known_plans.forget_all()
    with running(claim) as attempt, statements(db) as seen:
        async with db.transaction() as conn:
            await runs.commit(conn, finishing(run.run_id, claim), at=T0)
    attempt_updates = [s for s in seen if s.lstrip().upper().startswith("UPDATE ATTEMPTS")]
    # PostgreSQL, the plan known (this process created the run: known_plans): the run's
    # compare-and-set with the step's UPDATE, the attempt's end, the events, the join made ready
    # and its wake-up; not known: the step's UPDATE (+ the attempt's end and the plan read), then
    # the compare-and-set (+ the rest); SQLite: + the plan read, the join made ready, the events,
    # the wake-up, the attempt's end
    postgres = db.engine.dialect.name == "postgresql"
    assert (len(seen), len(attempt_updates)) == (((1 if plan_known else 2), 0) if postgres else (7, 1))
    assert attempt.ended
    async with db.reader() as conn:
        assert await _ended_at(conn, claim) == ("finished", T0)
        assert (await steps.get_step(conn, "acme", run.run_id, "metrics")).state == StepState.DONE


async def test_a_refused_fenced_commit_ends_no_attempt(db: Database) -> None:
    """A stale epoch refuses the step's UPDATE, so the attempt's end in it writes nothing (read in
    the same transaction, before any rollback); a moved run refuses after it, and rolls it back."""
    run = await create(db)
    claim = await _claim(db, run.run_id, "w", T0)
    assert claim is not None
    stale = claim.model_copy(update={"owner_epoch": claim.owner_epoch - 1})
    with running(stale) as attempt:
        async with db.transaction() as conn:
            with pytest.raises(StaleEpochError):
                await runs.commit(conn, finishing(run.run_id, stale), at=T0)
            assert await _ended_at(conn, stale) == (None, None)
    assert not attempt.ended
    with running(claim) as attempt, pytest.raises(ConcurrentUpdateError):
        async with db.transaction() as conn:
            await runs.commit(conn, finishing(run.run_id, claim, version=7), at=T0)
    assert not attempt.ended
    async with db.reader() as conn:
        assert await _ended_at(conn, claim) == (None, None)
        step = await steps.get_step(conn, "acme", run.run_id, "metrics")
    assert (step.state, step.owner_epoch) == (StepState.RUNNING, 1)
    assert await event_seqs(db, run.run_id) == [1]


async def test_a_fenced_commit_takes_the_runs_row_before_its_steps_row(db: Database) -> None:
    """PostgreSQL: a commit that decided on the run without locking it (``on_known_run``) waits
    for a writer holding the run (``lock_run``, a cancel) before it takes its step's row, the
    order every such writer takes them in. Taking the step first (the step's UPDATE, then the
    compare-and-set's run row) deadlocked with a writer going run -> step: found only after
    ``deadlock_timeout``, one of them failed."""
    if db.engine.dialect.name != "postgresql":
        pytest.skip("SQLite's one writer orders every transaction")
    run = await create(db)
    claim = await _claim(db, run.run_id, "w", T0)
    assert claim is not None
    async with db.transaction() as holder:  # a writer that holds the run, as lock_run does
        await holder.execute(select(runs_table).where(runs_table.c.run_id == run.run_id).with_for_update())
        holder_pid = (await holder.execute(text("SELECT pg_backend_pid()"))).scalar_one()

        async def commit() -> None:
            async with db.transaction() as conn:
                await runs.commit(conn, finishing(run.run_id, claim), at=T0)

        committing = asyncio.create_task(commit())
        await until_blocked_by(db, holder_pid, "the commit")
        async with db.transaction() as other:  # the step's row is free while the commit waits
            locked = (await other.execute(select(steps_table.c.step_id).where(
                steps_table.c.run_id == run.run_id, steps_table.c.step_id == "metrics").with_for_update(nowait=True)
            )).scalar_one()
        assert locked == "metrics" and not committing.done()
    await asyncio.wait_for(committing, timeout=10)
    async with db.reader() as conn:
        step = await steps.get_step(conn, "acme", run.run_id, "metrics")
    assert step.state == StepState.DONE


def _unversioned(run_id: str, step_id: str, claim: Claim) -> RunCommit:
    """A branch's result: it decides on nothing of the run, so it names no expected version."""
    return RunCommit(tenant_id="acme", run_id=run_id, expected_version=None,
                     fence=Fence(step_id=step_id, owner_epoch=claim.owner_epoch),
                     steps=(StepChange(step_id=step_id, state=StepState.DONE),),
                     events=(EventDraft(type=RunEventType.BRANCH_FINISHED, data={"step_id": step_id}),))


def test_a_commit_without_an_expected_version_needs_a_change_of_its_fenced_step() -> None:
    fence = Fence(step_id="metrics", owner_epoch=1)
    other_step = (StepChange(step_id="join", state=StepState.READY),)
    for missing in ({}, {"fence": fence}, {"fence": fence, "steps": other_step}):
        with pytest.raises(ValueError, match="needs a fence"):
            RunCommit(tenant_id="acme", run_id="r", expected_version=None, **missing)  # type: ignore[arg-type]


async def test_a_commit_without_an_expected_version_applies_on_the_run_as_its_fence_finds_it(db: Database) -> None:
    # Given a claimed step, and a writer that moved the run after the claim read it (version 1 -> 2)
    run = await create(db)
    claim = await _claim(db, run.run_id, "w", T0)
    assert claim is not None
    async with db.transaction() as conn:
        await runs.commit(conn, RunCommit(tenant_id="acme", run_id=run.run_id, expected_version=1,
                                          state=RunState.RUNNING), at=T0)
    with pytest.raises(ConcurrentUpdateError):  # naming the version the claim read, it is refused
        async with db.transaction() as conn:
            await runs.commit(conn, finishing(run.run_id, claim, version=1), at=T0)
    # When the step commits its result without an expected version
    async with db.transaction() as conn:
        after = await runs.commit(conn, _unversioned(run.run_id, "metrics", claim), at=T0)
    # Then it applies on version 2, the join it readies is READY in the same commit, and the run's
    # events stay gapless
    async with db.reader() as conn:
        done = await steps.get_step(conn, "acme", run.run_id, "metrics")
        join = await steps.get_step(conn, "acme", run.run_id, "join")
    assert (after.state_version, done.state, join.state) == (3, StepState.DONE, StepState.READY)
    assert await event_seqs(db, run.run_id) == list(range(1, after.last_seq + 1))


async def test_a_commit_without_an_expected_version_is_still_fenced(db: Database) -> None:
    run = await create(db)
    old = await _claim(db, run.run_id, "old", T0)
    new = await _claim(db, run.run_id, "new", T0 + LEASE + timedelta(seconds=1))  # the lease ran out: taken over
    assert old is not None and new is not None
    with pytest.raises(StaleEpochError):
        async with db.transaction() as conn:
            await runs.commit(conn, _unversioned(run.run_id, "metrics", old), at=T0)
    async with db.reader() as conn:
        assert (await runs.get_run(conn, "acme", run.run_id)).state_version == run.state_version


async def test_the_last_two_branches_of_a_join_finishing_at_once_ready_it(db: Database) -> None:
    """PostgreSQL: two commits without an expected version finish the last two branches a join
    waits on, the second waiting for the first's row lock. The second's statement read the plan in
    a snapshot taken before its wait (the first branch still RUNNING there) and applies on the
    version the lock found: it must not ready the join from that plan, and not leave it BLOCKED
    either (nobody else would ready it)."""
    if db.engine.dialect.name != "postgresql":
        pytest.skip("SQLite's one writer orders every transaction")
    run_id = new_id("run")
    await create(db, NewRun(
        tenant_id="acme", run_id=run_id, task_id=new_id("task"), task_kind="diagnose", subject_ref="incident:i1",
        workflow="incident-diagnosis@1",
        steps=(NewStep(step_id="logs", kind="logs", state=StepState.READY),
               NewStep(step_id="metrics", kind="metrics", state=StepState.READY),
               NewStep(step_id="join", kind="join", state=StepState.BLOCKED, depends_on=("logs", "metrics")))))
    async with db.transaction() as conn:
        claims = [await steps.claim_step(conn, "acme", run_id, s, owner="w", lease=LEASE, now=T0)
                  for s in ("logs", "metrics")]
    logs, metrics = claims
    assert logs is not None and metrics is not None
    known_plans.forget_all()  # a run another process created: no plan known here (known_plans waits in-process)
    async with db.transaction() as first:  # the first branch's commit, not committed yet: it holds the run
        await runs.commit(first, _unversioned(run_id, "logs", logs), at=T0)
        holder_pid = (await first.execute(text("SELECT pg_backend_pid()"))).scalar_one()

        async def second_branch() -> None:
            async with db.transaction() as conn:
                await runs.commit(conn, _unversioned(run_id, "metrics", metrics), at=T0)

        second = asyncio.create_task(second_branch())
        await until_blocked_by(db, holder_pid, "the second commit's statement")
    await asyncio.wait_for(second, timeout=10)
    async with db.reader() as conn:
        states = {s: (await steps.get_step(conn, "acme", run_id, s)).state for s in ("logs", "metrics", "join")}
        run = await runs.get_run(conn, "acme", run_id)
    assert states == {"logs": StepState.DONE, "metrics": StepState.DONE, "join": StepState.READY}
    assert await event_seqs(db, run_id) == list(range(1, run.last_seq + 1))


async def test_lock_fenced_run_returns_the_runs_state_and_checks_the_fence(db: Database) -> None:
    run = await create(db)
    old = await _claim(db, run.run_id, "old", T0)
    assert old is not None
    fence = Fence(step_id="metrics", owner_epoch=old.owner_epoch)
    async with db.transaction() as conn:
        assert await steps.lock_fenced_run(conn, "acme", run.run_id, fence) == RunState.PENDING
        await runs.commit(conn, RunCommit(tenant_id="acme", run_id=run.run_id, expected_version=1,
                                          state=RunState.CANCELLED), at=T0)
    async with db.transaction() as conn:  # the state as the run's row holds it now
        assert await steps.lock_fenced_run(conn, "acme", run.run_id, fence) == RunState.CANCELLED
    new = await _claim(db, run.run_id, "new", T0 + LEASE + timedelta(seconds=1))
    assert new is None  # a cancelled run hands out no work: revoke the claim to move the epoch instead
    async with db.transaction() as conn:
        await steps.revoke_claim(conn, "acme", run.run_id, "metrics", now=T0)
    with pytest.raises(StaleEpochError):
        async with db.transaction() as conn:
            await steps.lock_fenced_run(conn, "acme", run.run_id, fence)
    with pytest.raises(NotFoundError):
        async with db.transaction() as conn:
            await steps.lock_fenced_run(conn, "acme", run.run_id, Fence(step_id="nope", owner_epoch=1))
