"""The run's plan as a graph: which BLOCKED steps a commit makes ready.

A step waits (BLOCKED) until every step it depends on is finished (DONE, FAILED or
SKIPPED); what a failed dependency *means* is the waiting step's handler's business (a join
decides whether a failed optional branch matters). Pure, so the rule is testable alone.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol, TypeVar

from ira.core.states import FINISHED_STEP_STATES, StepState


class PlanStep(Protocol):
    """What the rule reads of a step: a ``Step``, or a plan row that carries only these (the
    store reads just them on every finishing commit: no JSON binding decoded, no model built)."""

    @property
    def step_id(self) -> str: ...

    @property
    def state(self) -> Any: ...

    @property
    def depends_on(self) -> Sequence[str]: ...


S = TypeVar("S", bound=PlanStep)


def newly_ready(steps: Sequence[S], changes: Mapping[str, StepState]) -> list[S]:
    """BLOCKED steps whose dependencies are all finished once ``changes`` apply."""
    after = {s.step_id: changes.get(s.step_id, s.state) for s in steps}
    return [
        s for s in steps
        if after[s.step_id] == StepState.BLOCKED and s.depends_on
        and all(after.get(dep) in FINISHED_STEP_STATES for dep in s.depends_on)
    ]
