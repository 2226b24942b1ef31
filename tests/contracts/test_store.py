"""The store contract: every backend (SQLite, PostgreSQL) must pass the same suite."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import select

from ira.core.commit import EventDraft, Fence, NewRun, NewStep, OutboxMessage, RunCommit, StepChange
from ira.core.envelope import Envelope
from ira.core.errors import (
    ConcurrentUpdateError,
    DuplicateMessageError,
    IllegalTransitionError,
    StaleEpochError,
)
from ira.core.events import RunEventType
from ira.core.ids import new_event_id, new_id
from ira.core.states import RunState, StepState
from ira.runtime.store import inbox, runs, steps
from ira.runtime.store.database import Database
from ira.runtime.store.schema import events, outbox

T0 = datetime(2026, 4, 29, 10, 0, tzinfo=UTC)
LEASE = timedelta(seconds=30)


def wakeup(tenant: str, run_id: str, step_id: str) -> OutboxMessage:
    env = Envelope(message_id=new_event_id(), type="step.ready", tenant_id=tenant, occurred_at=T0,
                   payload={"run_id": run_id, "step_id": step_id})
    return OutboxMessage(topic="ira.steps.v1", key=f"{tenant}:{run_id}", envelope=env)


def new_run(tenant: str = "acme", *, key: str | None = None) -> NewRun:
    run_id = new_id("run")
    return NewRun(
        tenant_id=tenant, run_id=run_id, task_id=new_id("task"), task_kind="diagnose", subject_ref="incident:i1",
        workflow="incident-diagnosis@1", idempotency_key=key,
        steps=(NewStep(step_id="metrics", kind="metrics", state=StepState.READY),
               NewStep(step_id="join", kind="join", state=StepState.BLOCKED, depends_on=("metrics",))),
        outbox=(wakeup(tenant, run_id, "metrics"),),
    )


async def create(db: Database, new: NewRun | None = None):  # type: ignore[no-untyped-def]
    async with db.transaction() as conn:
        run, _ = await runs.create_run(conn, new or new_run(), at=T0)
    return run


async def event_seqs(db: Database, run_id: str) -> list[int]:
    async with db.reader() as conn:
        return [e.run_seq for e in await runs.list_events(conn, "acme", run_id)]


async def test_create_run_is_idempotent_on_its_key(db: Database) -> None:
    first = await create(db, new_run(key="decision-1"))
    async with db.transaction() as conn:
        again, created = await runs.create_run(conn, new_run(key="decision-1"), at=T0)
    assert (again.run_id, created) == (first.run_id, False)
    assert first.state == RunState.PENDING and first.last_seq == 1
    assert await event_seqs(db, first.run_id) == [1]


async def test_conflicting_transition_writes_nothing(db: Database) -> None:
    run = await create(db)
    async with db.transaction() as conn:
        await runs.commit(conn, RunCommit(tenant_id="acme", run_id=run.run_id, expected_version=1,
                                          state=RunState.RUNNING,
                                              events=(EventDraft(type=RunEventType.RUN_STARTED),)), at=T0)
    stale = RunCommit(tenant_id="acme", run_id=run.run_id, expected_version=1, state=RunState.CANCELLED,
                      events=(EventDraft(type=RunEventType.RUN_CANCELLED),))
    with pytest.raises(ConcurrentUpdateError):
        async with db.transaction() as conn:
            await runs.commit(conn, stale, at=T0)
    async with db.reader() as conn:
        after = await runs.get_run(conn, "acme", run.run_id)
    assert (after.state, after.state_version, after.last_seq) == (RunState.RUNNING, 2, 2)
    assert await event_seqs(db, run.run_id) == [1, 2]


async def test_illegal_transition_is_refused(db: Database) -> None:
    run = await create(db)
    with pytest.raises(IllegalTransitionError):
        async with db.transaction() as conn:
            await runs.commit(conn, RunCommit(tenant_id="acme", run_id=run.run_id, expected_version=1,
                                              state=RunState.COMPLETED), at=T0)


async def _write_with_retry(db: Database, run_id: str, writer: int) -> int:
    """Read, decide, commit; on a conflict re-read and try again (bounded)."""
    for tries in range(1, 201):
        async with db.reader() as conn:
            current = await runs.get_run(conn, "acme", run_id)
        change = RunCommit(tenant_id="acme", run_id=run_id, expected_version=current.state_version,
                           events=(EventDraft(type=RunEventType.AGENT_TURN, data={"writer": writer}),))
        try:
            async with db.transaction() as conn:
                await runs.commit(conn, change, at=T0)
            return tries
        except ConcurrentUpdateError:
            await asyncio.sleep(0)  # yield so the winner's reader can see its commit
    raise AssertionError(f"writer {writer} never committed")


async def test_twenty_concurrent_writers_number_events_without_gaps(db: Database) -> None:
    run = await create(db)
    tries = await asyncio.gather(*(_write_with_retry(db, run.run_id, w) for w in range(20)))
    assert await event_seqs(db, run.run_id) == list(range(1, 22))
    async with db.reader() as conn:
        final = await runs.get_run(conn, "acme", run.run_id)
        writers = [e.data["writer"] for e in await runs.list_events(conn, "acme",
            run.run_id) if e.type == RunEventType.AGENT_TURN]
    assert final.state_version == 21 and final.last_seq == 21
    assert sorted(writers) == list(range(20))  # nobody overwrote anybody
    assert all(t >= 1 for t in tries)


async def _claim(db: Database, run_id: str, owner: str, now: datetime):  # type: ignore[no-untyped-def]
    async with db.transaction() as conn:
        return await steps.claim_step(conn, "acme", run_id, "metrics", owner=owner, lease=LEASE, now=now)


async def test_two_concurrent_claims_have_one_winner(db: Database) -> None:
    run = await create(db)
    claims = await asyncio.gather(*(_claim(db, run.run_id, f"w{i}", T0) for i in range(2)))
    winners = [c for c in claims if c is not None]
    assert len(winners) == 1 and winners[0].owner_epoch == 1
    async with db.reader() as conn:
        step = await steps.get_step(conn, "acme", run.run_id, "metrics")
    assert (step.state, step.owner, step.owner_epoch) == (StepState.RUNNING, winners[0].owner, 1)


async def test_stale_epoch_commit_is_rejected_after_takeover(db: Database) -> None:
    run = await create(db)
    old = await _claim(db, run.run_id, "old", T0)
    assert await _claim(db, run.run_id, "new", T0 + timedelta(seconds=5)) is None  # lease still live
    new = await _claim(db, run.run_id, "new", T0 + LEASE + timedelta(seconds=1))  # lease expired
    assert old is not None and new is not None and new.owner_epoch == old.owner_epoch + 1
    late = RunCommit(tenant_id="acme", run_id=run.run_id, expected_version=1,
                     fence=Fence(step_id="metrics", owner_epoch=old.owner_epoch),
                     steps=(StepChange(step_id="metrics", state=StepState.DONE),),
                     events=(EventDraft(type=RunEventType.BRANCH_FINISHED),))
    with pytest.raises(StaleEpochError):
        async with db.transaction() as conn:
            await runs.commit(conn, late, at=T0)
    with pytest.raises(StaleEpochError):
        async with db.transaction() as conn:
            await steps.heartbeat(conn, old, lease=LEASE, now=T0)
    async with db.reader() as conn:
        step = await steps.get_step(conn, "acme", run.run_id, "metrics")
    assert (step.state, step.owner, step.owner_epoch) == (StepState.RUNNING, "new", 2)
    assert await event_seqs(db, run.run_id) == [1]


async def test_owner_commit_finishes_step_and_releases_it(db: Database) -> None:
    run = await create(db)
    claim = await _claim(db, run.run_id, "w", T0)
    assert claim is not None
    done = RunCommit(tenant_id="acme", run_id=run.run_id, expected_version=1, state=RunState.RUNNING,
                     fence=Fence(step_id="metrics", owner_epoch=claim.owner_epoch),
                     steps=(StepChange(step_id="metrics", state=StepState.DONE, result_ref="sha256:x"),
                            StepChange(step_id="join", state=StepState.READY)),
                     events=(EventDraft(type=RunEventType.BRANCH_FINISHED),), outbox=(wakeup("acme", run.run_id,
                         "join"),))
    async with db.transaction() as conn:
        after = await runs.commit(conn, done, at=T0)
        metrics = await steps.get_step(conn, "acme", run.run_id, "metrics")
    assert (after.state, after.state_version, after.last_seq) == (RunState.RUNNING, 2, 2)
    assert (metrics.state, metrics.owner, metrics.result_ref) == (StepState.DONE, None, "sha256:x")
    assert await _claim(db, run.run_id, "again", T0 + timedelta(hours=1)) is None  # DONE is final


async def test_released_step_is_claimable_again_with_a_new_epoch(db: Database) -> None:
    run = await create(db)
    first = await _claim(db, run.run_id, "w1", T0)
    assert first is not None
    async with db.transaction() as conn:
        await steps.release_step(conn, first, now=T0)
    second = await _claim(db, run.run_id, "w2", T0)
    assert second is not None and second.owner_epoch == 2


async def test_no_claims_once_the_run_is_cancelled(db: Database) -> None:
    run = await create(db)
    async with db.transaction() as conn:
        await runs.commit(conn, RunCommit(tenant_id="acme", run_id=run.run_id, expected_version=1,
                                          state=RunState.CANCELLED), at=T0)
    assert await _claim(db, run.run_id, "w", T0) is None


async def test_inbox_drops_a_duplicate_and_keeps_the_transaction_usable(db: Database) -> None:
    run = await create(db)
    async with db.transaction() as conn:
        await inbox.record_inbox(conn, tenant_id="acme", consumer="c", message_id="m1", at=T0)
        with pytest.raises(DuplicateMessageError):
            await inbox.record_inbox(conn, tenant_id="acme", consumer="c", message_id="m1", at=T0)
        await runs.append_events(conn, "acme", run.run_id, [EventDraft(type=RunEventType.STEP_READY)], at=T0)
    assert await event_seqs(db, run.run_id) == [1, 2]
    async with db.transaction() as conn:  # another consumer may see the same message
        await inbox.record_inbox(conn, tenant_id="acme", consumer="other", message_id="m1", at=T0)


async def test_events_are_tenant_scoped(db: Database) -> None:
    run = await create(db)
    async with db.reader() as conn:
        assert await runs.list_events(conn, "other-tenant", run.run_id) == []
        rows = (await conn.execute(events.select())).all()
    assert len(rows) == 1


async def test_finishing_a_dependency_makes_its_dependent_ready_in_the_same_commit(db: Database) -> None:
    run = await create(db)
    claim = await _claim(db, run.run_id, "w", T0)
    assert claim is not None
    async with db.transaction() as conn:
        await runs.commit(conn, RunCommit(
            tenant_id="acme", run_id=run.run_id, expected_version=1,
            fence=Fence(step_id="metrics", owner_epoch=claim.owner_epoch),
            steps=(StepChange(step_id="metrics", state=StepState.FAILED),),
            events=(EventDraft(type=RunEventType.BRANCH_FAILED),)), at=T0)
        join = await steps.get_step(conn, "acme", run.run_id, "join")
        log = await runs.list_events(conn, "acme", run.run_id)
        wakeups = (await conn.execute(select(outbox.c.value).order_by(outbox.c.id))).all()
    assert join.state == StepState.READY
    assert [(e.run_seq, e.type) for e in log] == [(1, "RUN_CREATED"), (2, "BRANCH_FAILED"), (3, "STEP_READY")]
    assert Envelope.from_bytes(wakeups[-1].value).payload["step_id"] == "join"
