"""The Grafana dashboard and Prometheus rules shipped for ira itself: every metric they name is
one ira exports, the rules load, and each alert fires on the data it is written for."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

from prometheus_client import CollectorRegistry

import ira
from ira.runtime.telemetry import Metrics
from ira.sources.metrics import SourceMetrics
from tests.services import require_service

INFRA = Path(ira.__file__).parent / "infra"
RULES = INFRA / "prometheus" / "rules.yml"
DASHBOARD = INFRA / "grafana" / "ira-overview.json"
SUFFIXES = ("_total", "_bucket", "_sum", "_count", "_created")


def exported() -> set[str]:
    registry = CollectorRegistry()
    Metrics(registry)
    SourceMetrics.on(registry)
    return {sample.name for family in registry.collect() for sample in family.samples} | {
        family.name for family in registry.collect()}


def named_in(text: str) -> set[str]:
    return set(re.findall(r"\bira_[a-z_]+\b", text))


def test_every_metric_the_dashboard_and_rules_name_is_exported() -> None:
    known = exported()
    dashboard = json.loads(DASHBOARD.read_text())
    exprs = " ".join(t["expr"] for p in dashboard["panels"] for t in p["targets"])
    unknown = {name for name in named_in(exprs) | named_in(RULES.read_text())
               if name not in known and not any(name.removesuffix(s) in known for s in SUFFIXES)}
    assert not unknown, f"not exported by ira: {sorted(unknown)}"
    assert len({p["id"] for p in dashboard["panels"]}) == len(dashboard["panels"]) >= 8


def promtool(*args: str) -> subprocess.CompletedProcess[str]:
    if shutil.which("promtool") is None:
        require_service("promtool", "not installed (apt-get install prometheus)")
    return subprocess.run(["promtool", *args], capture_output=True, text=True, timeout=60, cwd=RULES.parent)


def test_the_rules_load_and_fire_on_what_they_are_written_for() -> None:
    checked = promtool("check", "rules", str(RULES))
    assert checked.returncode == 0, checked.stdout + checked.stderr
    tested = promtool("test", "rules", "rules_test.yml")
    assert tested.returncode == 0, tested.stdout + tested.stderr
