"""The binding check, table-driven: code decides what is in scope, whatever proposed it."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from ira.agents.binding import check_proposal, promql_problem
from ira.agents.tools import TOOLS
from ira.core.investigation import BranchKind
from tests.agents.scenario import binding

START = datetime(2026, 4, 29, 2, 0, tzinfo=UTC)
END = START + timedelta(minutes=30)
S = 'service="order-service"'


@pytest.mark.parametrize(("query", "problem"), [
    (f"histogram_quantile(0.95, sum by (le) (rate(x_bucket{{{S}}}[5m])))", None),
    (f"(sum(rate(x{{{S},status=~\"5..\"}}[1m])) or vector(0)) / sum(rate(x{{{S}}}[1m]))", None),
    ("up", "selects no labels"),
    (f"x{{{S}}} / y", "selector y has no"),
    ('x{service=~"order.*"}', "matches service =~"),
    ('x{service="payment-service"}', "only 'order-service'"),
    (f'x{{{S},service!="a"}}', "matches service !="),
    (f"x{{{S}}} offset 1h", "offset and @"),
    (f"x{{{S}}} @ 1700000000", "offset and @"),
    (f"rate(x{{{S}}}[2h])", "longer than the window"),
    (f"max_over_time(x{{{S}}}[1h:1m])", "longer than the window"),
])
def test_promql_scope(query: str, problem: str | None) -> None:
    found = promql_problem(query, "order-service", timedelta(minutes=30))
    assert (found is None) if problem is None else (found is not None and problem in found)


def args(tool: str, **values: object) -> object:
    return TOOLS[tool].args.model_validate(values)


@pytest.mark.parametrize(("tool", "values", "problem"), [
    ("logs.search", {"service": "order-service", "start": START, "end": END}, None),
    ("logs.search", {"service": "payment-service", "start": START, "end": END}, "outside the binding"),
    ("logs.search", {"service": "order-service", "start": START - timedelta(seconds=1), "end": END}, "window"),
    ("logs.search", {"service": "order-service", "start": END, "end": START}, "start is after end"),
    ("prometheus.query", {"query": f"up{{{S}}}", "at": END + timedelta(minutes=1)}, "window"),
    ("deployments.list", {"service": "order-service", "start": START, "end": END}, "not bound"),
])
def test_proposals_outside_the_binding_are_denied(tool: str, values: dict[str, object], problem: str | None) -> None:
    found = check_proposal(binding(BranchKind.LOGS, START, END, tools=("logs.search", "prometheus.query")), tool,
                           args(tool, **values))
    assert (found is None) if problem is None else (found is not None and problem in found)
