"""The bounded loop: stop reasons, binding enforcement, budget, redaction, replay after a crash."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path

import pytest
from sqlalchemy import select, text

from ira.agents.loop import DENIED_EVENT, BranchLoop, LoopLimits
from ira.agents.model import BranchTask, Conclusion, Decision, Finish, ModelCall, ToolProposal, Turn
from ira.agents.policies.rules import rule_policy
from ira.agents.redact import Redactor
from ira.agents.tables import agent_turns
from ira.connectors.bound import ConnectorSet
from ira.connectors.logs.jsonl import JsonlLogSource
from ira.connectors.runbooks import FileRunbookSource
from ira.core.budget import BudgetDimension as Dim
from ira.core.clock import FrozenClock
from ira.core.errors import ConnectorRejectedError, ConnectorUnavailableError
from ira.core.investigation import BranchKind, StopReason
from ira.core.signals import READ_ONLY_RETRY, LogQuery, LogResult
from ira.runtime.settings.agents import LogsBranchSettings
from ira.runtime.store import budget, runs
from ira.runtime.store.database import Database
from ira.runtime.store.schema import artifacts
from ira.runtime.store.schema import runs as runs_table
from ira.runtime.store.schema import steps as steps_table
from tests.agents import fixtures as fx
from tests.agents.scenario import SLICE, TENANT, binding, claim, create_branch_run
from tests.store_fixtures import until_blocked_by


@dataclass
class CountingLogs:
    """A real JSONL source that also remembers every query it answered."""

    inner: JsonlLogSource
    queries: list[LogQuery] = field(default_factory=list)

    async def search(self, query: LogQuery) -> LogResult:
        self.queries.append(query)
        return await self.inner.search(query)


@dataclass
class FailingLogs:
    """A log source that answers every query with the same error."""

    error: Exception
    queries: list[LogQuery] = field(default_factory=list)

    async def search(self, query: LogQuery) -> LogResult:
        self.queries.append(query)
        raise self.error


def logs_task(run_id: str, **kw) -> BranchTask:  # type: ignore[no-untyped-def]
    return BranchTask(kind=BranchKind.LOGS, binding=binding(BranchKind.LOGS, fx.START, fx.END, **kw), run_id=run_id,
                      step_id="logs")


async def start_logs(db: Database, **kw) -> tuple[str, BranchTask]:  # type: ignore[no-untyped-def]
    task = logs_task("", **kw)
    run_id = await create_branch_run(db, {BranchKind.LOGS: task.binding}, at=fx.NOW)
    return run_id, BranchTask(kind=task.kind, binding=task.binding, run_id=run_id, step_id="logs")


def loop(db: Database, policy, logs, **kw) -> BranchLoop:  # type: ignore[no-untyped-def]
    return BranchLoop(db=db, clock=FrozenClock(fx.NOW), policy=policy, connectors=ConnectorSet(logs=logs),
                      redactor=Redactor([fx.SECRET]), limits=LoopLimits(**kw))


def rules() -> object:
    return rule_policy(BranchKind.LOGS, LogsBranchSettings())


@dataclass
class Scripted:
    """A policy that proposes what a test says, one decision per turn, then finishes."""

    script: list[Decision]
    calls: int = 0
    name: str = "scripted"

    def estimate(self, task: BranchTask, history: Sequence[Turn]) -> None:
        return None

    async def decide(self, task: BranchTask, history: Sequence[Turn]) -> tuple[Decision, ModelCall | None]:
        self.calls += 1
        return (self.script[len(history)] if len(history) < len(self.script) else Finish()), None

    def conclude(self, task: BranchTask, history: Sequence[Turn]) -> Conclusion:
        return Conclusion()


class Obedient(Scripted):
    """The worst case of a model: it does whatever the last observation tells it to."""

    async def decide(self, task: BranchTask, history: Sequence[Turn]) -> tuple[Decision, ModelCall | None]:
        self.calls += 1
        seen = json.dumps([t.observation.data for t in history if t.observation])
        if not history:
            return ToolProposal(tool="logs.search", args=_search(task)), None
        if "tickets.create" in seen and len(history) == 1:
            return ToolProposal(tool="tickets.create", args={"title": "close all incidents"}), None
        if "payment-service" in seen and len(history) == 2:
            return ToolProposal(tool="logs.search", args=_search(task, service="payment-service")), None
        if len(history) == 3:
            far = task.binding.window_start - timedelta(days=30)
            return ToolProposal(tool="logs.search", args=_search(task) | {"start": far.isoformat()}), None
        return Finish(), None


def _search(task: BranchTask, service: str = "order-service") -> dict[str, object]:
    b = task.binding
    return {"service": service, "start": b.window_start.isoformat(), "end": b.window_end.isoformat(),
            "min_level": "error", "text": None, "limit": 100}


async def events_of(db: Database, run_id: str, kind: str) -> list[dict]:  # type: ignore[type-arg]
    async with db.reader() as conn:
        return [e.data for e in await runs.list_events(conn, TENANT, run_id) if e.type == kind]


async def test_rule_policy_finds_db_timeouts_and_finishes(db: Database, tmp_path: Path) -> None:
    source = JsonlLogSource(str(fx.write_logs(tmp_path / "app.jsonl")))
    run_id, task = await start_logs(db)
    outcome = await loop(db, rules(), source).run(task, await claim(db, run_id, BranchKind.LOGS, at=fx.NOW))
    assert outcome.stop_reason == StopReason.DONE
    conclusion = rules().conclude(task, outcome.turns)  # type: ignore[attr-defined]
    summaries = " | ".join(e.summary for e in conclusion.evidence)
    assert "db pool timeout: could not acquire connection" in summaries and "new since the baseline" in summaries
    assert any("pool exhaustion" in h.statement for h in conclusion.hypotheses)


async def test_repeating_policy_stops_with_no_progress(db: Database, tmp_path: Path) -> None:
    source = CountingLogs(JsonlLogSource(str(fx.write_logs(tmp_path / "app.jsonl"))))
    run_id, task = await start_logs(db)
    same = ToolProposal(tool="logs.search", args=_search(task))
    policy = Scripted([same] * 10)
    outcome = await loop(db, policy, source, no_progress_repeats=3).run(
        task, await claim(db, run_id, BranchKind.LOGS, at=fx.NOW))
    assert outcome.stop_reason == StopReason.NO_PROGRESS
    assert len(outcome.turns) == 3 and len(source.queries) == 3


def _varied(task: BranchTask, n: int = 10) -> list[Decision]:
    """Each proposal differs (its text), so only the identical failures can stop the loop."""
    return [ToolProposal(tool="logs.search", args=_search(task) | {"text": f"error {i}"}) for i in range(n)]


async def test_a_tool_failing_identically_stops_after_no_progress_repeats_calls(db: Database) -> None:
    source = FailingLogs(ConnectorRejectedError("loki", "parse error at char 12"))
    run_id, task = await start_logs(db)
    outcome = await loop(db, Scripted(_varied(task)), source).run(  # the default limits
        task, await claim(db, run_id, BranchKind.LOGS, at=fx.NOW))
    assert outcome.stop_reason == StopReason.NO_PROGRESS
    assert len(source.queries) == len(outcome.turns) == LoopLimits().no_progress_repeats == 3
    assert {t.observation.error_code for t in outcome.turns if t.observation} == {"connector_rejected"}


async def test_a_retryable_failure_also_stops_after_no_progress_repeats_tool_calls(db: Database) -> None:
    source = FailingLogs(ConnectorUnavailableError("loki", "connection refused"))
    run_id, task = await start_logs(db)
    outcome = await loop(db, Scripted(_varied(task)), source, no_progress_repeats=4).run(
        task, await claim(db, run_id, BranchKind.LOGS, at=fx.NOW))
    assert outcome.stop_reason == StopReason.NO_PROGRESS and len(outcome.turns) == 4
    assert len(source.queries) == 4 * READ_ONLY_RETRY.max_attempts  # each call retried per its contract, no more


async def test_budget_exhaustion_stops_new_calls_and_keeps_partial_evidence(db: Database, tmp_path: Path) -> None:
    source = CountingLogs(JsonlLogSource(str(fx.write_logs(tmp_path / "app.jsonl"))))
    run_id, task = await start_logs(db, slice_=SLICE | {Dim.TOOL_CALLS: 1})
    outcome = await loop(db, rules(), source).run(task, await claim(db, run_id, BranchKind.LOGS, at=fx.NOW))
    assert outcome.stop_reason == StopReason.BUDGET_EXHAUSTED
    assert len(source.queries) == 1  # the baseline search was never sent
    evidence = rules().conclude(task, outcome.turns).evidence  # type: ignore[attr-defined]
    assert evidence and "unknown in the baseline" in evidence[0].summary
    async with db.reader() as conn:
        used = await budget.get_balance(conn, TENANT, run_id, Dim.TOOL_CALLS, scope="logs")
    assert (used.settled, used.reserved) == (1, 0)


async def test_injected_instructions_cause_no_out_of_binding_call(db: Database, tmp_path: Path) -> None:
    source = CountingLogs(JsonlLogSource(str(fx.write_logs(tmp_path / "app.jsonl", injection=True))))
    run_id, task = await start_logs(db)
    obedient = Obedient([])
    outcome = await loop(db, obedient, source, max_denials=5).run(
        task, await claim(db, run_id, BranchKind.LOGS, at=fx.NOW))
    assert {(q.service, q.start) for q in source.queries} == {("order-service", fx.START)}
    denied = await events_of(db, run_id, DENIED_EVENT)
    assert [d["tool"] for d in denied] == ["tickets.create", "logs.search", "logs.search"]
    assert "not bound" in denied[0]["reason"] and "payment-service" in denied[1]["reason"]
    assert "outside the window" in denied[2]["reason"]
    assert outcome.stop_reason == StopReason.DONE


async def test_rule_policy_treats_an_injected_line_as_data(db: Database, tmp_path: Path) -> None:
    source = CountingLogs(JsonlLogSource(str(fx.write_logs(tmp_path / "app.jsonl", injection=True))))
    run_id, task = await start_logs(db)
    outcome = await loop(db, rules(), source).run(task, await claim(db, run_id, BranchKind.LOGS, at=fx.NOW))
    assert outcome.stop_reason == StopReason.DONE
    assert [q.service for q in source.queries] == ["order-service", "order-service"]
    assert await events_of(db, run_id, DENIED_EVENT) == []


async def test_too_many_denials_stop_the_branch(db: Database, tmp_path: Path) -> None:
    run_id, task = await start_logs(db)
    bad = ToolProposal(tool="slack.post", args={"text": "hi"})
    outcome = await loop(db, Scripted([bad] * 5), None, max_denials=2).run(
        task, await claim(db, run_id, BranchKind.LOGS, at=fx.NOW))
    assert outcome.stop_reason == StopReason.DENIED and len(outcome.turns) == 2


async def test_deadline_passed_stops_before_any_call(db: Database, tmp_path: Path) -> None:
    source = CountingLogs(JsonlLogSource(str(fx.write_logs(tmp_path / "app.jsonl"))))
    run_id, task = await start_logs(db, deadline=fx.NOW - timedelta(seconds=1))
    outcome = await loop(db, rules(), source).run(task, await claim(db, run_id, BranchKind.LOGS, at=fx.NOW))
    assert outcome.stop_reason == StopReason.DEADLINE and outcome.turns == [] and source.queries == []


async def test_secrets_never_reach_artifacts_or_the_policy(db: Database, tmp_path: Path) -> None:
    source = JsonlLogSource(str(fx.write_logs(tmp_path / "app.jsonl", secret=True)))
    run_id, task = await start_logs(db)
    outcome = await loop(db, rules(), source).run(task, await claim(db, run_id, BranchKind.LOGS, at=fx.NOW))
    shown = json.dumps([t.observation.data for t in outcome.turns if t.observation])
    assert "db connect failed" in shown and fx.SECRET not in shown
    async with db.reader() as conn:
        bodies = [bytes(r.body) for r in await conn.execute(select(artifacts.c.body))]
    assert bodies and not any(fx.SECRET.encode() in b for b in bodies)


async def test_tool_errors_become_observations(db: Database, tmp_path: Path) -> None:
    run_id, task = await start_logs(db)
    outcome = await loop(db, rules(), None).run(task, await claim(db, run_id, BranchKind.LOGS, at=fx.NOW))
    assert outcome.stop_reason == StopReason.DONE
    assert {t.observation.error_code for t in outcome.turns if t.observation} == {"not_configured"}


async def test_a_new_owner_replays_committed_turns_instead_of_deciding_again(db: Database, tmp_path: Path) -> None:
    source = CountingLogs(JsonlLogSource(str(fx.write_logs(tmp_path / "app.jsonl"))))
    run_id, task = await start_logs(db)
    first = Scripted([ToolProposal(tool="logs.search", args=_search(task))])
    crashed = await loop(db, first, source, max_turns=1).run(
        task, await claim(db, run_id, BranchKind.LOGS, at=fx.NOW, lease=timedelta(seconds=1)))
    assert len(crashed.turns) == 1 and first.calls == 1
    second = Scripted([ToolProposal(tool="logs.search", args={"never": "asked"})])
    later = await claim(db, run_id, BranchKind.LOGS, at=fx.NOW + timedelta(minutes=1), owner="agent-2")
    outcome = await loop(db, second, source).run(task, later)
    assert later.owner_epoch == 2 and outcome.stop_reason == StopReason.DONE
    assert second.calls == 1  # only the turn after the replayed one was decided
    assert len(source.queries) == 1  # the committed call was not made again
    assert outcome.turns[0].observation == crashed.turns[0].observation
    async with db.reader() as conn:
        rows = (await conn.execute(select(agent_turns.c.turn, agent_turns.c.owner_epoch)
                                   .where(agent_turns.c.run_id == run_id).order_by(agent_turns.c.turn))).all()
    assert [tuple(r) for r in rows] == [(1, 1), (2, 2)]


async def test_runbooks_branch_flags_the_v2_runbook(db: Database, tmp_path: Path) -> None:
    b = binding(BranchKind.RUNBOOKS, fx.START, fx.END, labels={"version": "v3", "summary": "p95 latency high"})
    run_id = await create_branch_run(db, {BranchKind.RUNBOOKS: b}, at=fx.NOW)
    task = BranchTask(kind=BranchKind.RUNBOOKS, binding=b, run_id=run_id, step_id="runbooks")
    policy = rule_policy(BranchKind.RUNBOOKS, None)
    runner = BranchLoop(db=db, clock=FrozenClock(fx.NOW), policy=policy, redactor=Redactor(),
                        connectors=ConnectorSet(runbooks=FileRunbookSource(fx.write_runbooks(tmp_path / "rb"))))
    outcome = await runner.run(task, await claim(db, run_id, BranchKind.RUNBOOKS, at=fx.NOW))
    found = {e.data["runbook_id"]: e for e in policy.conclude(task, outcome.turns).evidence}
    assert set(found) == {"order-service-db-pool-v3", "order-service-latency-v2"}
    assert found["order-service-db-pool-v3"].data["applies"] is True
    assert found["order-service-latency-v2"].data["flagged"] is True and "FLAGGED" in found[
        "order-service-latency-v2"].summary


async def test_a_turns_commit_takes_the_runs_row_before_its_steps_row(db: Database, tmp_path: Path) -> None:
    """PostgreSQL: a turn's commit waiting for a writer that holds the run (``lock_run``, a
    cancel) does not hold its step's row meanwhile, which that writer takes next. Locking the
    step first (its fence) and the run only to append the turn's events deadlocked with a cancel
    (found by PostgreSQL only after ``deadlock_timeout``, one of them failed)."""
    if db.engine.dialect.name != "postgresql":
        pytest.skip("SQLite's one writer orders every transaction")
    source = JsonlLogSource(str(fx.write_logs(tmp_path / "app.jsonl")))
    run_id, task = await start_logs(db)
    branch = await claim(db, run_id, BranchKind.LOGS, at=fx.NOW)
    async with db.transaction() as holder:  # a writer that holds the run, as lock_run does
        await holder.execute(select(runs_table).where(runs_table.c.run_id == run_id).with_for_update())
        holder_pid = (await holder.execute(text("SELECT pg_backend_pid()"))).scalar_one()
        running = asyncio.create_task(loop(db, rules(), source).run(task, branch))
        await until_blocked_by(db, holder_pid, "the turn's commit")
        async with db.transaction() as other:  # the step's row is free while the turn waits
            locked = (await other.execute(select(steps_table.c.step_id).where(
                steps_table.c.run_id == run_id, steps_table.c.step_id == "logs").with_for_update(nowait=True)
            )).scalar_one()
        assert locked == "logs" and not running.done()
    outcome = await asyncio.wait_for(running, timeout=30)
    assert outcome.stop_reason == StopReason.DONE
