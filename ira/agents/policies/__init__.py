"""Policies propose the next action of a branch; the loop decides whether it may run.

A policy is a function of the branch task and the turns so far (decisions + observations),
so a resumed loop can replay committed turns and ask only for the next one.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from ira.agents.model import BranchTask, Conclusion, Decision, ModelCall, Turn
from ira.core.model import Model


class ModelEstimate(Model):
    """What the next decision may cost, reserved before the model is asked."""

    tokens: int
    cost_micros: int = 0


class Policy(Protocol):
    @property
    def name(self) -> str:
        """Who decides (``metrics-rules``, ``llm:<provider>``), for traces and the result."""
        ...

    def estimate(self, task: BranchTask, history: Sequence[Turn]) -> ModelEstimate | None:
        """None for a policy that calls no model."""
        ...

    async def decide(self, task: BranchTask, history: Sequence[Turn]) -> tuple[Decision, ModelCall | None]:
        """The next decision; provider failures come back as ``Invalid`` decisions, not exceptions."""
        ...

    def conclude(self, task: BranchTask, history: Sequence[Turn]) -> Conclusion:
        """Evidence and hypotheses from what was observed (deterministic)."""
        ...
