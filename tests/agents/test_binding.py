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


def test_metric_queries_may_select_a_declared_dependency_and_nothing_else() -> None:
    b = binding(BranchKind.METRICS, START, END).model_copy(update={"dependencies": ("orders-db",)})
    window = {"start": START, "end": END, "step_seconds": 15.0}
    dep = 'sum(pg_stat_activity_count{service="orders-db"}) / max(pg_settings_max_connections{service="orders-db"})'
    assert check_proposal(b, "prometheus.query_range", args("prometheus.query_range", query=dep, **window)) is None
    other = 'max(up{service="payments-db"})'
    problem = check_proposal(b, "prometheus.query_range", args("prometheus.query_range", query=other, **window))
    assert problem is not None and "payments-db" in problem
    logs = args("logs.search", service="orders-db", start=START, end=END)
    assert "outside the binding" in (check_proposal(binding(BranchKind.LOGS, START, END).model_copy(
        update={"dependencies": ("orders-db",)}), "logs.search", logs) or "")  # widened for metrics only


def test_changes_may_reach_back_to_the_look_back_but_no_further() -> None:
    since = START - timedelta(hours=6)
    b = binding(BranchKind.METRICS, START, END).model_copy(update={"changes_since": since})
    inside = args("deployments.list", service="order-service", start=since, end=END)
    beyond = args("deployments.list", service="order-service", start=since - timedelta(minutes=1), end=END)
    assert check_proposal(b, "deployments.list", inside) is None
    assert "outside the window" in (check_proposal(b, "deployments.list", beyond) or "")
    query = args("prometheus.query_range", query=f"up{{{S}}}", start=since, end=END, step_seconds=60.0)
    assert "outside the window" in (check_proposal(b, "prometheus.query_range", query) or "")  # not for metrics
