"""Deterministic rule policies (the default): a fixed plan of tool calls, then analysis.

A rule policy walks its plan in order; a call that failed with a retryable error is tried
once more, anything else moves on. It never reads instructions from what it observes: the
plan depends only on the binding, the configuration and (metrics) the metric names a
discovery query returned. What it concludes comes from the
branch's analyzer (``rules_metrics``, ``rules_logs``, ``rules_runbooks``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from ira.agents.model import BranchTask, Conclusion, Finish, ModelCall, Observation, ToolProposal, Turn
from ira.agents.policies import ModelEstimate
from ira.core.investigation import BranchKind, Evidence

MAX_TRIES = 2

Planner = Callable[[BranchTask, Sequence[Turn]], list[ToolProposal]]
"""The calls to make given what was observed so far (a plan may grow: discovery, then queries)."""
Analyzer = Callable[[BranchTask, Sequence[Turn]], Conclusion]


@dataclass(frozen=True)
class RulePolicy:
    name: str
    planner: Planner
    analyzer: Analyzer

    def estimate(self, task: BranchTask, history: Sequence[Turn]) -> ModelEstimate | None:
        return None

    async def decide(self, task: BranchTask, history: Sequence[Turn]) -> tuple[Finish | ToolProposal, ModelCall | None]:
        for planned in self.planner(task, history):
            if not _settled(planned, history):
                return planned, None
        return Finish(summary=f"{self.name}: plan complete"), None

    def conclude(self, task: BranchTask, history: Sequence[Turn]) -> Conclusion:
        return self.analyzer(task, history)


def _settled(planned: ToolProposal, history: Sequence[Turn]) -> bool:
    """Done once it succeeded, failed for good, or used its tries."""
    tries = [t.observation for t in history if isinstance(t.decision, ToolProposal)
             and t.decision.tool == planned.tool and t.decision.args == planned.args and t.observation]
    return any(o.ok or not o.retryable for o in tries) or len(tries) >= MAX_TRIES


def observed(history: Sequence[Turn], tool: str, rationale: str | None = None) -> list[tuple[int, Observation]]:
    """Successful observations of ``tool`` (and of the planned step named ``rationale``)."""
    found = []
    for t in history:
        d, o = t.decision, t.observation
        if (isinstance(d, ToolProposal) and o is not None and o.ok and d.tool == tool
                and (rationale is None or d.rationale == rationale)):
            found.append((t.turn, o))
    return found


def evidence(task: BranchTask, seen: tuple[int, Observation], summary: str, *, index: int,
             data: dict[str, Any] | None = None) -> Evidence:
    """An evidence item citing the turn's raw answer (artifact) and the query behind it."""
    turn, obs = seen
    return Evidence(evidence_id=f"{task.kind.value}-{turn}-{index}", source=obs.tool, summary=summary,
                    query=obs.query, window_start=obs.window_start, window_end=obs.window_end, partial=obs.partial,
                    artifact_ref=obs.artifact_ref, data=data or {})


def rule_policy(kind: BranchKind, settings: Any) -> RulePolicy:
    """The rule policy of a branch kind; ``settings`` is that branch's settings section."""
    from ira.agents.policies import rules_logs, rules_metrics, rules_runbooks

    if kind is BranchKind.METRICS:
        return RulePolicy("metrics-rules", rules_metrics.planner(settings), rules_metrics.analyze)
    if kind is BranchKind.LOGS:
        return RulePolicy("logs-rules", rules_logs.planner(settings), rules_logs.analyze)
    return RulePolicy("runbooks-rules", rules_runbooks.plan, rules_runbooks.analyze)
