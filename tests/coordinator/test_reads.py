"""What the coordinator reads on its way from a create_run decision to WAITING(approval).

Each read is a store round trip on every run (issue #14): a flow reads what it needs once and
passes it along, and skips questions whose answer it already knows. These tests watch the SQL
one run issues, on SQLite and PostgreSQL, and pin the reads that went away.
"""

from __future__ import annotations

import re
from datetime import timedelta

from sqlalchemy import select, text

from ira.coordinator import facts, gate, records
from ira.coordinator.approval import Choice, Verdict
from ira.coordinator.verify import RunResult
from ira.core.commit import EventDraft, RunCommit
from ira.core.events import RunEventType
from ira.core.states import ApprovalState, RunState, StepState, WaitKind
from ira.runtime.store import runs, steps
from ira.runtime.store.artifact_cache import ArtifactCache
from ira.runtime.store.database import Database
from ira.runtime.store.schema import attempts
from tests.coordinator.harness import T0, build, decision, envelope
from tests.coordinator.test_approvals import waiting_for_approval
from tests.coordinator.test_complete_in_receipt import approve_through_an_intake
from tests.store_fixtures import statements


def reads(seen: list[str], table: str) -> list[str]:
    return [s for s in seen if s.startswith("SELECT") and re.search(rf"\bFROM {table}\b", s)]


async def _to_approval(db: Database) -> tuple[list[str], str]:
    pump, _ = build(db)
    with statements(db) as seen:
        await pump.decide(envelope(decision()))
        await pump.drain()
    await pump.close()
    async with db.reader() as conn:
        [(run_id,)] = await _open_runs(conn)
        run = await runs.get_run(conn, "acme", run_id)
        assert (run.state, run.wait_kind) == (RunState.WAITING, WaitKind.APPROVAL)
    return seen, run_id


async def _open_runs(conn):  # type: ignore[no-untyped-def]
    from sqlalchemy import select

    from ira.runtime.store.schema import runs as table
    return (await conn.execute(select(table.c.run_id))).all()


async def test_a_decision_looks_for_its_run_and_the_incidents_open_run_in_one_read(db: Database) -> None:
    pump, _ = build(db)
    with statements(db) as seen:
        await pump.decide(envelope(decision()))
    await pump.close()
    before_insert = seen[:next(i for i, s in enumerate(seen) if s.startswith("INSERT INTO runs"))]
    assert len(reads(before_insert, "runs")) == 1


async def test_the_draft_is_read_once_per_step_and_its_next_version_not_read_again(db: Database) -> None:
    seen, run_id = await _to_approval(db)
    assert len(reads(seen, "ticket_drafts")) == 2  # synthesize and approve_ticket, once each
    async with db.reader() as conn:
        [draft] = await records.list_drafts(conn, "acme", run_id)
    assert draft.version == 1


def _version_reads(seen: list[str]) -> list[str]:
    return [s for s in reads(seen, "events") if re.search(r"\b(events|logged)\.type IN", s)]


async def test_the_incident_version_is_read_once_per_step(db: Database) -> None:
    seen, _ = await _to_approval(db)
    assert len(_version_reads(seen)) == 2  # synthesize and approve_ticket, once each


async def test_synthesize_reads_the_draft_and_the_incident_version_in_one_statement_on_postgresql(
        db: Database) -> None:
    seen, _ = await _to_approval(db)
    both = [s for s in _version_reads(seen) if s in reads(seen, "ticket_drafts")]
    assert len(both) == (1 if db.engine.dialect.name == "postgresql" else 0)  # gate.draft_and_version


async def test_a_first_ask_reads_no_approvals_and_a_first_join_no_review(db: Database) -> None:
    """No approval can exist before approve_ticket's first claim, nor a review choice before the
    join's: both come from a person answering what an earlier claim of that step asked."""
    seen, run_id = await _to_approval(db)
    assert reads(seen, "approvals") == []
    assert [s for s in reads(seen, "events") if "events.run_seq" in s] == []
    async with db.reader() as conn:
        [approval] = await records.list_approvals(conn, "acme", run_id)
    assert approval.payload_hash and approval.resource_version == 1


async def test_branch_results_the_cache_lacks_are_read_in_one_statement(db: Database, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """Branch results another process wrote (so this one's artifact cache lacks them) come in one read."""
    monkeypatch.setattr(facts, "cache_of", lambda conn: ArtifactCache())
    seen, _ = await _to_approval(db)
    batched = [s for s in reads(seen, "artifacts") if "artifacts.ref IN" in s]
    assert len(batched) == 2  # the join's branches; synthesize's accepted ones


async def test_branch_results_the_cache_holds_are_not_read(db: Database) -> None:
    seen, _ = await _to_approval(db)
    assert [s for s in reads(seen, "artifacts") if "artifacts.ref IN" in s] == []


async def test_a_run_is_created_running_without_a_second_write_of_its_row(db: Database) -> None:
    pump, _ = build(db)
    with statements(db) as seen:
        await pump.decide(envelope(decision()))
    await pump.close()
    assert [s for s in seen if s.startswith("UPDATE runs")] == []
    async with db.reader() as conn:
        [(run_id,)] = await _open_runs(conn)
        run = await runs.get_run(conn, "acme", run_id)
        log = await runs.list_events(conn, "acme", run_id)
    assert (run.state, run.state_version, run.last_seq) == (RunState.RUNNING, 1, 2)
    assert [(e.run_seq, e.type) for e in log] == [(1, "RUN_CREATED"), (2, "RUN_STARTED")]
    assert log[1].data["branches"] and log[1].data["branch_deadline"]


async def test_steps_decide_on_the_run_their_claim_read_where_writers_are_serialized(db: Database) -> None:
    """On SQLite (one writer at a time) join, synthesize and approve_ticket read no run row
    besides their claims' (the commit's compare-and-set still guards it); on PostgreSQL each
    locks it, so concurrent writers queue."""
    seen, run_id = await _to_approval(db)
    run_reads = [s for s in reads(seen, "runs") if s.startswith("SELECT runs.tenant_id, runs.run_id")]
    async with db.reader() as conn:  # one attempt per claim, whatever statements a claim takes
        claims = (await conn.execute(select(attempts.c.attempt_id).where(attempts.c.run_id == run_id))).all()
    # besides the claims: the decision's (by key and incident) and each scripted branch's (3, locking as agents do)
    by_steps = len(run_reads) - len(claims) - 1 - 3
    # PostgreSQL: synthesize's and approve_ticket's, and the join's with its plan (facts.lock_run_with_plan)
    with_plan = [s for s in seen if s.startswith("WITH locked AS (SELECT runs.tenant_id") and "FROM locked LEFT OUTER "
                 "JOIN steps" in s]
    assert (by_steps, len(with_plan)) == ((0, 0) if db.engine.dialect.name == "sqlite" else (2, 1))


async def test_a_step_whose_run_moved_after_its_claim_still_finishes_in_its_attempt(db: Database) -> None:
    pump, _ = build(db)
    pump.held.add("synthesize")
    await pump.decide(envelope(decision()))
    await pump.drain()
    ctx = await pump.claim_parked()
    async with db.transaction() as conn:  # another writer moves the run between claim and handler
        moved = EventDraft(type=RunEventType.INCIDENT_UPDATED, data={"substantive": False})
        await runs.commit(conn, RunCommit(tenant_id="acme", run_id=ctx.run.run_id,
                                          expected_version=ctx.run.state_version, events=(moved,)), at=T0)
    await pump.dispatchers[0].run_claimed(ctx)
    await pump.drain()
    await pump.close()
    async with db.reader() as conn:
        step = await steps.get_step(conn, "acme", ctx.run.run_id, "synthesize")
        run = await runs.get_run(conn, "acme", ctx.run.run_id)
    assert (step.state, step.owner_epoch) == (StepState.DONE, ctx.claim.owner_epoch)
    assert (run.state, run.wait_kind) == (RunState.WAITING, WaitKind.APPROVAL)


async def test_an_approvals_decision_reads_what_it_judges_in_one_statement_after_the_lock(db: Database) -> None:
    """PostgreSQL: the approval, the current draft and the incident version it binds to are one
    read (``gate.approval_view``), a statement of its own after the run's lock (so they are
    read after any writer it waited for); SQLite reads them separately (no round trip)."""
    pump, deps, _, _, run_id, approval = await waiting_for_approval(db)
    await pump.close()
    with statements(db) as seen:
        async with db.transaction() as conn:
            decided, judgement = await gate.decide(
                conn, "acme", approval.approval_id, choice=Choice.APPROVE, principal="lead",
                roles=frozenset({approval.required_role}), reason=None, config=deps.config, at=T0)
    assert (decided.state, judgement.verdict) == (ApprovalState.APPROVED, Verdict.APPLY)
    before_write = seen[:next(i for i, s in enumerate(seen) if s.startswith("UPDATE approvals"))]
    assert before_write[0].startswith("SELECT runs.")  # the run's lock first
    after_lock = before_write[1:]
    if db.engine.dialect.name == "postgresql":
        assert before_write[0].endswith("FOR UPDATE")
        assert len(after_lock) == 1 and "json_agg" in after_lock[0]
    else:
        assert sorted(t for t in ("approvals", "ticket_drafts", "events") if reads(after_lock, t)) == [
            "approvals", "events", "ticket_drafts"]


async def test_the_approval_view_holds_what_the_separate_reads_hold(db: Database) -> None:
    pump, deps, _, _, run_id, approval = await waiting_for_approval(db)
    await pump.close()
    async with db.transaction() as conn:
        if db.engine.dialect.name == "postgresql":  # JSON spells timestamps in the session's zone
            await conn.execute(text("SET LOCAL TimeZone = 'Asia/Tokyo'"))
        run = await facts.lock_run(conn, "acme", run_id)
        view = await gate.approval_view(conn, run)
        draft = await records.current_draft(conn, "acme", run_id)
        assert view.draft == draft and view.draft is not None
        assert view.version == await facts.version_with_draft(conn, run, draft)
        assert view.approvals == tuple(await records.list_approvals(conn, "acme", run_id))
        assert view.approval(approval.approval_id) == approval
        assert view.usable() is None  # asked, not approved yet
        stamps = [view.draft.created_at, *(a.expires_at for a in view.approvals)]
        assert all(stamp.utcoffset() == timedelta(0) for stamp in stamps)


async def test_an_approved_run_reads_its_draft_only_in_the_approval_view_and_records_it(db: Database) -> None:
    """From the approval to COMPLETED the current draft is read where an approval is judged
    (``gate.approval_view``: on PostgreSQL inside its one statement) and, for the run's result,
    with synthesize's report ref in one statement (``verify._REFS``), never on its own there.
    The ticket's permit, in the decision's own transaction, judges on the decision's view (the
    approval just settled in it): the view is read once, not again for the permit."""
    pump, deps, _, _, run_id, approval = await waiting_for_approval(db)
    await pump.close()
    with statements(db) as seen:
        await approve_through_an_intake(db, deps, approval, as_people_do=True)
    async with db.reader() as conn:
        run = await runs.get_run(conn, "acme", run_id)
        complete = await steps.get_step(conn, "acme", run_id, "complete")
        draft = await records.current_draft(conn, "acme", run_id)
        result = await facts.load_model(conn, "acme", complete.result_ref, model=RunResult)
    assert run.state == RunState.COMPLETED and draft is not None and result is not None
    assert result.draft_ref == draft.ref
    alone = [s for s in seen if s.startswith("SELECT ticket_drafts.")]
    views = [s for s in seen if "json_agg" in s and "approvals" in s]
    if db.engine.dialect.name == "postgresql":
        assert (len(alone), len(views)) == (0, 1)  # the decision's view, in one statement
    else:  # the decision's view: the draft, the version events and the approvals, each once
        assert len(alone) == 1 and len([s for s in seen if s.startswith("SELECT approvals.")]) == 1
