"""A run commit's events and promotions written by its compare-and-set, the plan read by its
fenced step's UPDATE (PostgreSQL, ``store/folded_cas.py``, ``store/step_changes.py``): events
numbered after the run's ``last_seq``, masked, stored as drafted; a refused compare-and-set
writes none; a join made ready by the commit that finishes its last dependency. SQLite keeps
separate statements; both must store the same."""

from __future__ import annotations

import pytest
from sqlalchemy import func, select

from ira.core.commit import EventDraft, Fence, NewRun, NewStep, OutboxMessage, RunCommit, StepChange
from ira.core.envelope import Envelope
from ira.core.errors import ConcurrentUpdateError
from ira.core.events import RunEventType
from ira.core.ids import new_event_id, new_id
from ira.core.states import RunState, StepState
from ira.runtime.store import run_traces, runs, step_changes, steps
from ira.runtime.store.database import Database
from ira.runtime.store.outbox import message_headers
from ira.runtime.store.schema import events, outbox
from tests.contracts.test_store import LEASE, T0, create
from tests.store_fixtures import statements

TRACE = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
DRAFTS = (EventDraft(type=RunEventType.RUN_STARTED, data={"note": "naïve ✓", "n": [1, 2.5, None, True]}),
          EventDraft(type=RunEventType.AGENT_TURN, data={"said": "token=AKIAABCDEFGHIJKLMNOP"}),
          EventDraft(type=RunEventType.AGENT_TURN))


async def test_a_commits_events_are_appended_in_order_masked_and_as_drafted(db: Database) -> None:
    run = await create(db)  # its first event is run_seq 1
    with statements(db) as seen:
        async with db.transaction() as conn:
            after = await runs.commit(conn, RunCommit(tenant_id="acme", run_id=run.run_id, expected_version=1,
                                                      state=RunState.RUNNING, events=DRAFTS), at=T0)
    async with db.reader() as conn:
        log = await runs.list_events(conn, "acme", run.run_id)
    assert after.last_seq == 4
    assert [(e.run_seq, e.type, e.at) for e in log[1:]] == [
        (2, RunEventType.RUN_STARTED, T0), (3, RunEventType.AGENT_TURN, T0), (4, RunEventType.AGENT_TURN, T0)]
    assert log[1].data == {"note": "naïve ✓", "n": [1, 2.5, None, True]}
    assert "AKIAABCDEFGHIJKLMNOP" not in str(log[2].data) and log[3].data == {}
    assert len({e.event_id for e in log}) == 4
    # PostgreSQL: one statement for the compare-and-set and its events
    separate = [s for s in seen if s.upper().startswith("INSERT INTO EVENTS")]
    assert len(separate) == (0 if db.engine.dialect.name == "postgresql" else 1)


async def test_a_refused_compare_and_set_appends_no_event(db: Database) -> None:
    run = await create(db)
    async with db.transaction() as conn:
        with pytest.raises(ConcurrentUpdateError):
            await runs.commit(conn, RunCommit(tenant_id="acme", run_id=run.run_id, expected_version=7,
                                              events=DRAFTS), at=T0)
        # read in the refused commit's own transaction, before its rollback
        count = (await conn.execute(select(func.count()).select_from(events).where(
            events.c.run_id == run.run_id))).scalar_one()
        current = await runs.get_run(conn, "acme", run.run_id)
    assert (count, current.last_seq, current.state_version) == (1, 1, 1)


def fan_in() -> NewRun:
    run_id = new_id("run")
    return NewRun(tenant_id="acme", run_id=run_id, task_id=new_id("task"), task_kind="diagnose",
                  subject_ref="incident:i1", workflow="incident-diagnosis@1",
                  steps=(NewStep(step_id="logs", kind="logs", state=StepState.READY),
                         NewStep(step_id="metrics", kind="metrics", state=StepState.READY),
                         NewStep(step_id="join", kind="join", state=StepState.BLOCKED, depends_on=("logs", "metrics"))))


async def _finish(db: Database, run_id: str, step_id: str, version: int) -> list[str]:
    """Claim ``step_id`` and finish it with a fenced commit; the statements of that commit."""
    async with db.transaction() as conn:
        claimed = await steps.claim_step(conn, "acme", run_id, step_id, owner="w", lease=LEASE, now=T0)
    assert claimed is not None
    with statements(db) as seen:
        async with db.transaction() as conn:
            await runs.commit(conn, RunCommit(
                tenant_id="acme", run_id=run_id, expected_version=version,
                fence=Fence(step_id=step_id, owner_epoch=claimed.owner_epoch),
                steps=(StepChange(step_id=step_id, state=StepState.DONE),),
                events=(EventDraft(type=RunEventType.BRANCH_FINISHED, data={"step_id": step_id}),)), at=T0)
    return seen


async def test_a_join_is_made_ready_by_the_commit_that_finishes_its_last_dependency(db: Database) -> None:
    run = await create(db, fan_in())
    first = await _finish(db, run.run_id, "logs", 1)
    async with db.reader() as conn:
        assert (await steps.get_step(conn, "acme", run.run_id, "join")).state == StepState.BLOCKED

    last = await _finish(db, run.run_id, "metrics", 2)

    async with db.reader() as conn:
        join = await steps.get_step(conn, "acme", run.run_id, "join")
        log = await runs.list_events(conn, "acme", run.run_id)
        wakeups = (await conn.execute(select(outbox.c.value).where(outbox.c.tenant_id == "acme")
                                      .order_by(outbox.c.id))).all()
    assert (join.state, join.owner, join.lease_until, join.updated_at) == (StepState.READY, None, None, T0)
    assert [(e.run_seq, e.type, e.data) for e in log[1:]] == [
        (2, "BRANCH_FINISHED", {"step_id": "logs"}), (3, "BRANCH_FINISHED", {"step_id": "metrics"}),
        (4, "STEP_READY", {"step_id": "join"})]
    assert [Envelope.from_bytes(w.value).payload["step_id"] for w in wakeups] == ["join"]
    # PostgreSQL: the compare-and-set writes the fenced step's change, the events, the join's
    # promotion and its wake-up (the plan known: this process created the run, known_plans);
    # SQLite: each its own statement
    assert (len(first), len(last)) == ((1, 1) if db.engine.dialect.name == "postgresql" else (4, 6))


def _messages(run_id: str) -> tuple[OutboxMessage, ...]:
    return tuple(OutboxMessage(topic=f"ira.t{i % 2}.v1", key=f"acme:{run_id}", awaits="c" if i == 1 else None,
                               envelope=Envelope(message_id=new_event_id(), type="x", tenant_id="acme",
                                                 occurred_at=T0, payload={"i": i, "s": "naïve ✓"}))
                 for i in range(3))


async def _outbox_of(db: Database, run_id: str) -> list[tuple[object, ...]]:
    async with db.reader() as conn:
        rows = (await conn.execute(select(outbox).where(outbox.c.key == f"acme:{run_id}")
                                   .order_by(outbox.c.id))).all()
    return [(r.message_id, r.topic, r.value, r.headers, r.created_at, r.claimed_by, r.sent_at, r.awaits) for r in rows]


@pytest.mark.parametrize("trace_known", [True, False])
async def test_a_commits_outbox_rows_are_written_in_order_whether_or_not_the_runs_trace_is_known(
        db: Database, trace_known: bool) -> None:
    # Given a run created in a trace, its trace context remembered by this process or not
    run = await create(db, fan_in().model_copy(update={"traceparent": TRACE}))
    if not trace_known:
        run_traces.forget(run.tenant_id, run.run_id)
    messages = _messages(run.run_id)

    with statements(db) as seen:
        async with db.transaction() as conn:
            await runs.commit(conn, RunCommit(tenant_id="acme", run_id=run.run_id, expected_version=1,
                                              outbox=messages), at=T0)

    # Then the rows are the messages, in order, each carrying the run's trace
    stamped = [m.model_copy(update={"envelope": m.envelope.model_copy(update={"traceparent": TRACE})})
               for m in messages]
    assert await _outbox_of(db, run.run_id) == [
        (m.envelope.message_id, m.topic, m.envelope.to_bytes(), message_headers(m), T0, None, None, m.awaits)
        for m in stamped]
    # PostgreSQL with the trace known: written by the compare-and-set
    folded = trace_known and db.engine.dialect.name == "postgresql"
    assert len([s for s in seen if s.upper().startswith("INSERT INTO OUTBOX")]) == (0 if folded else 1)


def _graph(edges: dict[str, tuple[str, ...]]) -> NewRun:
    """A run whose steps wait on ``edges`` (step -> what it depends on); those with none READY."""
    return NewRun(tenant_id="acme", run_id=new_id("run"), task_id=new_id("task"), task_kind="diagnose",
                  subject_ref="incident:i1", workflow="incident-diagnosis@1",
                  steps=tuple(NewStep(step_id=s, kind="x", depends_on=deps,
                                      state=StepState.BLOCKED if deps else StepState.READY)
                              for s, deps in edges.items()))


async def _states(db: Database, run_id: str) -> dict[str, StepState]:
    async with db.reader() as conn:
        return {s.step_id: s.state for s in await steps.list_steps(conn, "acme", run_id)}


async def test_each_commit_readies_exactly_the_steps_whose_last_dependency_it_finishes(db: Database) -> None:
    # Given a graph with a fan-in, a diamond and a step waiting on one of two roots
    run = await create(db, _graph({"a": (), "b": (), "c": ("a",), "d": ("a", "b"), "e": ("c", "d"), "f": ("b",)}))
    readied = []
    # When the steps finish one by one, each by its own fenced commit
    for version, step_id in enumerate(("a", "b", "c", "d", "e", "f"), start=1):
        before = await _states(db, run.run_id)
        if before[step_id] != StepState.READY:
            raise AssertionError(f"{step_id} was never readied: {before}")
        await _finish(db, run.run_id, step_id, version)
        after = await _states(db, run.run_id)
        readied.append(sorted(s for s, state in after.items()
                              if state == StepState.READY and before[s] == StepState.BLOCKED))
    # Then each commit readied the steps it finished the last dependency of, and only those
    assert readied == [["c"], ["d", "f"], [], ["e"], [], []]


async def test_a_finishing_commit_reads_only_the_plan_it_can_ready_on_postgresql(db: Database) -> None:
    # Given a chain of 40 steps whose first 20 are done
    names = [f"s{i:02d}" for i in range(40)]
    run = await create(db, _graph({name: (names[i - 1],) if i else () for i, name in enumerate(names)}))
    for i in range(20):
        await _finish(db, run.run_id, names[i], i + 1)
    async with db.transaction() as conn:
        claimed = await steps.claim_step(conn, "acme", run.run_id, "s20", owner="w", lease=LEASE, now=T0)
    assert claimed is not None
    # When the 21st finishes
    async with db.transaction() as conn:
        _, _, plan = await step_changes.apply_fenced(conn, RunCommit(
            tenant_id="acme", run_id=run.run_id, expected_version=21,
            fence=Fence(step_id="s20", owner_epoch=claimed.owner_epoch),
            steps=(StepChange(step_id="s20", state=StepState.DONE),)), at=T0)
    # Then its UPDATE read the step itself and the one waiting on it, not the run's 40 (SQLite
    # reads the plan in a statement of its own, in with_promotions)
    if db.engine.dialect.name == "postgresql":
        assert plan is not None and [(r.step_id, r.state) for r in plan] == [("s20", "running"), ("s21", "blocked")]
    else:
        assert plan is None
