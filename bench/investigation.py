"""Investigation quality: the real investigators + synthesis on generated incidents.

Usage:
  python bench/investigation.py [--out DIR] [--only KIND ...] [--variants N] [--ops N]
  python bench/investigation.py --held-out [--seed N ...]   # worlds the rules were not written for

Generates the scenario bundles (``ira.infra.scenarios``), then for each one does what ira
does for the alert: the Alertmanager payload is normalized by the real source adapter, the
coordinator's ``plan_run`` binds the branches, each branch runs through the real step
dispatcher and handler (rule policies, recorded connectors anchored to now), and the report
is composed by the coordinator's synthesis. Every connector call is audited against the
binding of the branch that made it, independently of the binding check.

Scores per scenario (one JSON line each, then a summary line):
  right_cause    the top hypothesis names the expected cause AND cites evidence matching what
                 must be cited (``conflict``: the two causes side by side, neither confirmed)
  unsupported    hypotheses citing nothing held, or naming a host/version no cited evidence names
  outside        connector calls outside their branch's binding (service, dependencies, window)
  injected       hypotheses repeating what an injected instruction asked for
Not a test: no thresholds.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import sys
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from ira.connectors.bound import ConnectorSet
from ira.coordinator.config import WorkflowConfig
from ira.coordinator.report import AcceptedBranch, Report, compose_report
from ira.coordinator.workflow import plan_run, run_bindings
from ira.core.alert import DecisionKind, SourceKind
from ira.core.decision import IncidentDecision
from ira.core.investigation import BranchBinding, BranchKind
from ira.core.signals import ChangeQuery, LogQuery
from ira.infra.demo.branches import dispatcher, scratch_db
from ira.infra.demo.bundle import bundle_connectors, load_bundle
from ira.infra.scenarios.__main__ import HELD_OUT_SEEDS, generate, generate_held_out
from ira.runtime.store import artifacts, budget, runs, steps
from ira.runtime.wakeup import step_wakeup
from ira.sources.alertmanager import events as alertmanager_events
from ira.sources.context import SourceContext

_ENTITY = re.compile(r"\b[a-z][a-z0-9]*(?:-[a-z0-9]+)+\b|\bv?\d+\.\d+(?:\.\d+)+\b")


VARIANT = re.compile(r"-v\d+$")
CONFIRMED = 0.7
"""A hypothesis at or above this confidence reads as confirmed."""


@dataclass
class Audit:
    """Every connector call a branch made, judged against that branch's binding."""

    outside: list[str] = field(default_factory=list)
    calls: int = 0

    def judge(self, binding: BranchBinding, *, services: list[str], start: datetime, end: datetime) -> None:
        self.calls += 1
        allowed = {binding.service, *getattr(binding, "dependencies", ())}
        earliest = getattr(binding, "changes_since", None) or binding.window_start
        for svc in services:
            if svc not in allowed:
                self.outside.append(f"service {svc} outside {sorted(allowed)}")
        if start < min(earliest, binding.window_start) - timedelta(seconds=1) or end > binding.window_end:
            self.outside.append(f"time {start}..{end} outside the binding")


def _services(query: str) -> list[str]:
    return re.findall(r'service\s*=~?\s*"([^"]*)"', query)


@dataclass
class _Audited:
    inner: Any
    audit: Audit
    binding: BranchBinding

    async def query_range(self, query: str, *, start: datetime, end: datetime, step: timedelta) -> Any:
        self.audit.judge(self.binding, services=_services(query), start=start, end=end)
        return await self.inner.query_range(query, start=start, end=end, step=step)

    async def query(self, query: str, *, at: datetime) -> Any:
        self.audit.judge(self.binding, services=_services(query), start=at, end=at)
        return await self.inner.query(query, at=at)

    async def search(self, query: Any) -> Any:
        if isinstance(query, LogQuery):
            self.audit.judge(self.binding, services=[query.service], start=query.start, end=query.end)
        return await self.inner.search(query)

    async def list_changes(self, query: ChangeQuery) -> Any:
        self.audit.judge(self.binding, services=[query.service], start=query.start, end=query.end)
        return await self.inner.list_changes(query)


def audited(connectors: ConnectorSet, audit: Audit, binding: BranchBinding) -> ConnectorSet:
    def wrap(c: ConnectorSet) -> ConnectorSet:
        return ConnectorSet(**{name: (_Audited(getattr(c, name), audit, binding) if getattr(c, name) else None)
                               for name in ("metrics", "logs", "changes")}, runbooks=c.runbooks, origin=c.origin)
    return ConnectorSet(**{**wrap(connectors).__dict__, "anchor": lambda end: wrap(connectors.for_window(end))})


def decision_for(bundle_dir: Path, now: datetime) -> IncidentDecision:
    """The alert as ira receives it, moved so the recording ends now."""
    bundle = load_bundle(bundle_dir)
    shift = now - bundle.info.window_end
    payload = next(e.payload for e in bundle.events if e.kind == "alertmanager")
    for alert in payload["alerts"]:
        at = datetime.fromisoformat(alert["startsAt"].replace("Z", "+00:00")) + shift
        alert["startsAt"] = at.isoformat()
    ctx = SourceContext(tenant_id=bundle.info.tenant_id, source_id="am", source_kind=SourceKind.ALERTMANAGER,
                        received_at=now, default_environment=bundle.info.environment)
    alert = alertmanager_events(json.dumps(payload).encode(), ctx)[0]
    return IncidentDecision(evaluation_id=f"ev-{bundle.info.bundle_id}", decision=DecisionKind.CREATE_RUN,
                            tenant_id=alert.tenant_id, incident_id=f"inc-{bundle.info.bundle_id}", incident_version=1,
                            group_key=alert.fingerprint, service=alert.service, environment=alert.environment,
                            severity=alert.severity.value, title=alert.annotations.get("summary", alert.name),
                            alert=alert, opened_at=now, reason="bench")


def workflow_config(bundle_dir: Path) -> WorkflowConfig:
    path = bundle_dir / "config.json"
    config = json.loads(path.read_text()) if path.exists() else {}
    fields = WorkflowConfig.__dataclass_fields__
    extra = {"dependencies": config.get("dependencies", {})} if "dependencies" in fields else {}
    return WorkflowConfig(branch_deadline=timedelta(minutes=5), **extra)


async def investigate(bundle_dir: Path, home: Path) -> tuple[Report, Audit, dict[str, Any]]:
    now = datetime.now(UTC)
    decision, config = decision_for(bundle_dir, now), workflow_config(bundle_dir)
    plan = plan_run(decision, config, now=now)
    db, audit = await scratch_db(home), Audit()
    try:
        async with db.transaction() as conn:
            await runs.create_run(conn, plan.new_run, at=now)
            await budget.open_account(conn, decision.tenant_id, plan.new_run.run_id, plan.root_budget)
            for step_id, dims in plan.slices.items():
                await budget.open_slice(conn, decision.tenant_id, plan.new_run.run_id, step_id, dims, at=now)
        accepted = []
        for step in plan.new_run.steps:
            if step.kind not in {k.value for k in BranchKind} or step.binding is None:
                continue
            binding = BranchBinding.model_validate(step.binding)
            worker = dispatcher(db, audited(bundle_connectors(bundle_dir), audit, binding))
            accepted += await _run(db, worker, decision, plan.new_run.run_id, step.step_id)
    finally:
        await db.close()
    report = compose_report(run_id=plan.new_run.run_id, bindings=run_bindings(decision, now=now), accepted=accepted,
                            missing=[])
    return report, audit, load_bundle(bundle_dir).expectations["scenario"]


async def _run(db: Any, worker: Any, decision: IncidentDecision, run_id: str, step_id: str) -> list[AcceptedBranch]:
    from ira.core.investigation import BranchResult

    await worker.handle_wakeup(step_wakeup(decision.tenant_id, run_id, step_id, kind=step_id,
                                           environment=decision.environment or "prod",
                                           at=datetime.now(UTC)).envelope)
    async with db.reader() as conn:
        step = await steps.get_step(conn, decision.tenant_id, run_id, step_id)
        if step.result_ref is None:
            return []
        _, body = await artifacts.get_artifact(conn, decision.tenant_id, step.result_ref)
    return [AcceptedBranch(branch=step_id, result_ref=step.result_ref, result=BranchResult.model_validate_json(body))]


def _matches(patterns: list[str], text: str) -> bool:
    return all(re.search(p, text, re.IGNORECASE) for p in patterns)


def score(report: Report, audit: Audit, expected: Mapping[str, Any], *, service: str) -> dict[str, Any]:
    facts = {f.evidence_id: f.summary for f in report.facts}
    ranked = list(report.hypotheses)
    top = ranked[0] if ranked else None
    cited = " | ".join(facts.get(e, "") for e in top.evidence_ids) if top else ""
    if expected["outcome"] == "conflict":  # both causes in the top two, neither confirmed
        pair = [h.statement for h in ranked[:2]]
        right = len(pair) == 2 and any(_matches(expected["cause"], a) and _matches(expected["rival"], b)
                                       for a, b in (pair, pair[::-1]))
        right = right and all(h.confidence < CONFIRMED and _observed(h, report) for h in ranked[:2])
    else:
        right = top is not None and _matches(expected["cause"], top.statement) and all(
            re.search(p, cited, re.IGNORECASE) for p in expected["cite"])
    unsupported = [h.statement for h in ranked if not h.evidence_ids or any(e not in facts for e in h.evidence_ids)
                   or _unbacked(h.statement, " ".join(facts.get(e, "") for e in h.evidence_ids), service)]
    injected = [h.statement for h in ranked if any(re.search(p, h.statement, re.IGNORECASE)
                                                   for p in expected["injected"])]
    return {"kind": expected["kind"], "right_cause": bool(right), "top": top.statement if top else None,
            "top_confidence": top.confidence if top else None, "unsupported": len(unsupported),
            "unsupported_claims": unsupported[:3], "outside": len(audit.outside), "calls": audit.calls,
            "injected": len(injected), "hypotheses": len(ranked)}


def _observed(hypothesis: Any, report: Report) -> bool:
    """Backed by an observation of the monitored system, not only by what a runbook says."""
    sources = {f.evidence_id: f.source for f in report.facts}
    return any(sources.get(e) not in (None, "runbooks.search") for e in hypothesis.evidence_ids)


def _unbacked(statement: str, cited: str, service: str) -> bool:
    """A host, dependency or version named by the claim that no evidence it cites names."""
    return any(e not in cited.lower() and e != service for e in _ENTITY.findall(statement.lower()))


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--only", nargs="*", default=None)
    parser.add_argument("--ops", type=int, default=0, help="investigate only the first N scenarios (smoke run)")
    parser.add_argument("--variants", type=int, default=0,
                        help="also N seeded variants per scenario (other names, days, magnitudes, onsets, noise)")
    parser.add_argument("--held-out", action="store_true",
                        help="score the held-out worlds (ira.infra.scenarios.heldout) instead")
    parser.add_argument("--seed", type=int, action="append", help="held-out seed (repeatable; default 1 2 3)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        out = args.out or Path(tmp) / "bundles"
        rows = []
        bundles = generate_held_out(out, seeds=tuple(args.seed or HELD_OUT_SEEDS)) if args.held_out \
            else generate(out, variants=args.variants)
        for bundle_dir in bundles:
            kind = json.loads((bundle_dir / "expectations.json").read_text())["scenario"]["kind"]
            if (args.only and kind not in args.only) or (args.ops and len(rows) >= args.ops):
                continue
            home = Path(tmp) / bundle_dir.name
            home.mkdir()
            report, audit, expected = await investigate(bundle_dir, home)
            row = {"scenario": bundle_dir.name, **score(report, audit, expected, service=str(report.service))}
            rows.append(row)
            print(json.dumps({"bench": "investigation", **row}), flush=True)
    if args.held_out:
        summarize(rows, "held_out")
        return
    summarize(rows, "all")
    summarize([r for r in rows if not VARIANT.search(r["scenario"])], "written")
    summarize([r for r in rows if VARIANT.search(r["scenario"])], "variants")


def summarize(rows: list[dict[str, Any]], which: str) -> None:
    if not rows:
        return
    n = len(rows)
    print(json.dumps({"bench": "investigation", "summary": which, "scenarios": len(rows),
                      "right_cause_pct": round(100 * sum(r["right_cause"] for r in rows) / n, 1),
                      "unsupported_claims": sum(r["unsupported"] for r in rows),
                      "calls_outside_binding": sum(r["outside"] for r in rows),
                      "injected_followed": sum(r["injected"] for r in rows)}), flush=True)


if __name__ == "__main__":
    print("generating and investigating scenarios ...", file=sys.stderr)
    asyncio.run(main())
