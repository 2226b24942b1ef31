"""Pure pieces of the rule policies and the loop's model."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from ira.agents.model import BranchTask
from ira.agents.policies.analysis import shift_of, template_of
from ira.core.investigation import BranchKind
from tests.agents.scenario import binding

T0 = datetime(2026, 4, 29, 2, 0, tzinfo=UTC)


def series(values: list[float]) -> list[tuple[datetime, float]]:
    return [(T0 + timedelta(minutes=i), v) for i, v in enumerate(values)]


def test_shift_finds_the_jump_after_the_baseline() -> None:
    shift = shift_of(series([0.2, 0.21, 0.2, 0.22, 2.0, 2.1, 2.1]), T0 + timedelta(minutes=3))
    assert shift is not None and shift.baseline == 0.2 and shift.peak == 2.1
    assert shift.jump_at == T0 + timedelta(minutes=4) and shift.ratio > 10


def test_a_series_that_starts_after_the_split_uses_its_first_third() -> None:
    shift = shift_of(series([0.2, 0.2, 0.2, 2.0, 2.0, 2.0]), T0 - timedelta(minutes=10))
    assert shift is not None and shift.baseline == 0.2 and shift.peak == 2.0


def test_a_flat_series_has_no_jump() -> None:
    shift = shift_of(series([0.3] * 8), T0 + timedelta(minutes=4))
    assert shift is not None and shift.jump_at is None


@pytest.mark.parametrize(("message", "template"), [
    ("db pool timeout: could not acquire connection within 2500ms (pool size 20, in use 20)",
     "db pool timeout: could not acquire connection within <n> (pool size <n>, in use <n>)"),
    ("payment gateway returned 502 for order ord_649267f3a4", "payment gateway returned <n> for order <id>"),
    ('user "alice" from 10.0.0.7:443 trace 3f2a9c1e-aaaa-bbbb-cccc-0123456789ab',
     "user <s> from <addr> trace <id>"),
])
def test_templates_mask_variable_parts(message: str, template: str) -> None:
    assert template_of(message) == template


def test_split_is_before_the_alert_start_or_the_middle() -> None:
    start, end = T0, T0 + timedelta(minutes=30)
    alert = (T0 + timedelta(minutes=28)).isoformat()
    with_start = BranchTask(kind=BranchKind.LOGS, run_id="r", step_id="logs",
                            binding=binding(BranchKind.LOGS, start, end, labels={"alert_started_at": alert}))
    assert with_start.split_at == T0 + timedelta(minutes=23)
    without = BranchTask(kind=BranchKind.LOGS, run_id="r", step_id="logs", binding=binding(BranchKind.LOGS, start, end))
    assert without.split_at == T0 + timedelta(minutes=15)


def test_the_digest_an_llm_sees_gives_each_series_shift_and_onset() -> None:
    from datetime import UTC, datetime, timedelta

    from ira.agents.model import Observation
    from ira.agents.policies.digest import digest

    t0 = datetime(2026, 5, 1, 12, 0, tzinfo=UTC)
    points = [[(t0 + timedelta(minutes=m)).isoformat(), 0.2 if m < 20 else 2.4] for m in range(30)]
    data = {"query": "p95", "start": t0.isoformat(), "end": (t0 + timedelta(minutes=29)).isoformat(),
            "step_seconds": 60.0, "series": [{"labels": {"service": "geo"}, "points": points}]}
    seen = digest(Observation(tool="prometheus.query_range", ok=True, summary="p95", data=data),
                  split_at=t0 + timedelta(minutes=15))
    assert seen is not None
    [shift] = seen["shifts"]
    assert (shift["baseline"], shift["peak"], shift["onset"]) == (0.2, 2.4, "2026-05-01T12:20:00Z")
    assert digest(Observation(tool="runbooks.search", ok=True, summary="", data={}), split_at=t0) is None
