"""Synthesis across branches, on evidence as the rule branches hand it back (pure)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from ira.coordinator.synthesis import Item, synthesize
from ira.core.investigation import Evidence

ALERT = datetime(2026, 9, 1, 12, 0, tzinfo=UTC)
SVC = "checkout"


def at(minutes: float) -> str:
    return (ALERT + timedelta(minutes=minutes)).strftime("%Y-%m-%dT%H:%M:%SZ")


def metric(eid: str, family: str, *, service: str = SVC, onset: float | None = -5, saturated: bool = False,
           unit: str = "ratio", peak: str = "100%") -> Item:
    data = {"family": family, "signal": family, "label": family, "service": service, "unit": unit,
            "onset": at(onset) if onset is not None else None, "abnormal": onset is not None,
            "saturated": saturated, "peak_text": peak}
    return Item(Evidence(evidence_id=eid, source="prometheus.query_range", summary=f"{family} of {service}",
                         data=data), "metrics")


def log(eid: str, cause: str, *, entity: str | None = None, onset: float | None = -5) -> Item:
    data: dict[str, Any] = {"cause": cause, "entity": entity, "window_count": 40, "level": "error",
                            "onset": at(onset) if onset is not None else None}
    return Item(Evidence(evidence_id=eid, source="logs.search", summary=f"{cause} {entity}", data=data), "logs")


def change(eid: str, minutes: float, *, description: str = "", version: str | None = "2.0") -> Item:
    data = {"kind": "deploy" if version else "config change", "service": SVC, "version": version, "at": at(minutes),
            "description": description}
    return Item(Evidence(evidence_id=eid, source="deployments.list", summary=f"change {eid}", data=data), "metrics")


def runbook(eid: str, *causes: str) -> Item:
    return Item(Evidence(evidence_id=eid, source="runbooks.search", summary="runbook", data={
        "runbook_id": eid, "causes": list(causes), "applies": True}), "runbooks")


def run(*items: Item) -> Any:
    return synthesize(items, service=SVC, alert_started_at=ALERT)


def test_a_deploy_before_the_onset_leads_and_its_own_saturation_and_errors_are_the_mechanism() -> None:
    found = run(metric("lat", "latency", onset=-4, unit="s"), change("dep", -6),
                metric("pool", "pool", onset=-5, saturated=True), log("l1", "pool", onset=-5))
    top = found.candidates[0]
    assert top.kind == "change" and len(found.candidates) == 1
    assert {"dep", "pool", "l1", "lat"} <= set(top.evidence_ids) and top.branches == {"metrics"}
    assert "deploy of checkout 2.0" in top.statement and "pool" in top.statement


def test_log_lines_naming_a_dependency_join_its_metrics_across_branches() -> None:
    found = run(metric("lat", "latency", onset=-4, unit="s"), metric("dep", "latency", service="pricing", unit="s"),
                log("t", "timeout", entity="pricing.internal"))
    top = found.candidates[0]
    assert top.kind == "dependency" and set(top.evidence_ids) >= {"dep", "t"} and top.branches == {"metrics", "logs"}
    assert "pricing" in top.statement and "time out" in top.statement


def test_a_change_never_explains_a_dependency_so_both_stay_side_by_side_unconfirmed() -> None:
    found = run(metric("lat", "latency", onset=-4, unit="s"), change("dep", -6),
                metric("store", "latency", service="sessions", unit="s"), log("t", "timeout", entity="sessions"))
    first, second = found.candidates[:2]
    assert {first.kind, second.kind} == {"change", "dependency"}
    assert first.confidence <= 0.55 and second.confidence <= 0.55
    assert any("conflicting" in n for n in found.notes)


def test_a_config_change_hours_earlier_counts_only_when_it_names_what_saturated() -> None:
    named = run(metric("err", "errors", onset=-4), change("cfg", -180, description="pool max_size 40 -> 8",
                                                           version=None), metric("pool", "pool", saturated=True))
    assert named.candidates[0].kind == "change" and "2.9 h before the onset" in named.candidates[0].statement
    unrelated = run(metric("err", "errors", onset=-4), change("cfg", -180, description="enable spell-check",
                                                               version=None), metric("pool", "pool", saturated=True))
    assert unrelated.candidates[0].kind == "resource" and "cfg" not in unrelated.candidates[0].evidence_ids


def test_a_resource_that_moved_after_the_symptoms_is_doubted() -> None:
    early = run(metric("lat", "latency", onset=-10, unit="s"), metric("cpu", "cpu", onset=-11, saturated=True))
    late = run(metric("lat", "latency", onset=-10, unit="s"), metric("cpu", "cpu", onset=-2, saturated=True))
    assert late.candidates[0].confidence < early.candidates[0].confidence
    assert any("after the symptoms" in u for u in late.candidates[0].unverified)


def test_runbook_causes_are_promoted_only_when_the_data_confirms_them() -> None:
    found = run(metric("disk", "disk", saturated=True), log("nospace", "disk", entity="/var/lib"),
                runbook("rb", "disk full on the WAL volume", "credentials rotated"))
    top = found.candidates[0]
    assert "rb" in top.evidence_ids and top.runbooks == ["runbook rb lists it: disk full on the WAL volume"]
    assert found.notes == ("runbook rb lists causes the data did not confirm: credentials rotated",)


def test_nothing_moved_is_stated_with_the_stable_signals_and_the_empty_change_list() -> None:
    stable = metric("lat", "latency", onset=None, unit="s")
    none = Item(Evidence(evidence_id="none", source="deployments.list", summary="no deploy or config change",
                         data={"kind": "none", "service": SVC}), "metrics")
    found = run(stable, none, log("inj", "", entity=None))
    (only,) = found.candidates
    assert only.kind == "noise" and set(only.evidence_ids) == {"lat", "none"} and "flapping" in only.statement
