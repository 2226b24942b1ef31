"""Which BLOCKED steps become ready."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from ira.core.plan import newly_ready
from ira.core.run import Step
from ira.core.states import StepState as S


def step(step_id: str, state: S, *deps: str) -> Step:
    return Step(tenant_id="t", run_id="r", step_id=step_id, kind=step_id, state=state, depends_on=deps,
                updated_at=datetime(2026, 4, 29, tzinfo=UTC))


PLAN = [step("metrics", S.RUNNING), step("logs", S.RUNNING), step("runbooks", S.RUNNING),
        step("join", S.BLOCKED, "metrics", "logs", "runbooks"), step("synthesize", S.BLOCKED, "join")]


@pytest.mark.parametrize(("changes", "ready"), [
    ({"metrics": S.DONE}, []),
    ({"metrics": S.DONE, "logs": S.DONE}, []),
    ({"metrics": S.DONE, "logs": S.DONE, "runbooks": S.FAILED}, ["join"]),  # a failed branch still finishes
    # a skipped step counts as finished: its dependents run and decide what the skip means
    ({"metrics": S.DONE, "logs": S.DONE, "runbooks": S.SKIPPED, "join": S.SKIPPED}, ["synthesize"]),
])
def test_join_waits_for_every_branch_to_finish(changes: dict[str, S], ready: list[str]) -> None:
    assert [s.step_id for s in newly_ready(PLAN, changes)] == ready
