"""The binding the coordinator builds carries what the alert knows, the change look-back and the
declared dependencies (pure: ``plan_run``)."""

from __future__ import annotations

from datetime import timedelta

from ira.coordinator.config import WorkflowConfig
from ira.coordinator.workflow import plan_run
from ira.core.investigation import BranchBinding
from tests.coordinator.harness import T0, decision


def bound(config: WorkflowConfig, **annotations: str) -> dict[str, BranchBinding]:
    d = decision()
    d = d.model_copy(update={"alert": d.alert.model_copy(update={"annotations": {
        "summary": "p99 above 2s", "runbook_url": "https://runbooks.example/order", **annotations}})})
    plan = plan_run(d, config, now=T0)
    return {s.step_id: BranchBinding.model_validate(s.binding) for s in plan.new_run.steps if s.binding}


def test_a_binding_carries_the_alert_start_annotations_and_runbook_url() -> None:
    b = bound(WorkflowConfig())["metrics"]
    assert b.alert_started_at == T0 - timedelta(minutes=5)
    assert b.annotations["summary"] == "p99 above 2s" and b.runbook_url == "https://runbooks.example/order"


def test_the_change_look_back_reaches_before_the_window() -> None:
    b = bound(WorkflowConfig(change_lookback=timedelta(hours=6)))["metrics"]
    assert b.changes_since == T0 - timedelta(hours=6) and b.window_start == T0 - timedelta(minutes=35)


def test_dependencies_come_from_the_catalog_and_the_alert_well_formed_only() -> None:
    config = WorkflowConfig(dependencies={"order-service": ("orders-db", "order-service")})
    b = bound(config, depends_on="payments, bad name!, orders-db")["logs"]
    assert b.dependencies == ("orders-db", "payments")
    assert b.services == ("order-service", "orders-db", "payments")
