"""The root budget of a run and the slices its branches draw from it (DESIGN.md §4)."""

from __future__ import annotations

from enum import StrEnum

from pydantic import Field

from ira.core.model import Model


class BudgetDimension(StrEnum):
    STEPS = "steps"
    TOOL_CALLS = "tool_calls"
    MODEL_TOKENS = "model_tokens"
    COST_MICROS = "cost_micros"
    WALL_MS = "wall_ms"


ROOT_SCOPE = "root"


class BudgetLimits(Model):
    """Limits per dimension; a dimension left out is not budgeted (unlimited)."""

    limits: dict[BudgetDimension, int] = Field(default_factory=dict)


class BudgetBalance(Model):
    """One dimension of one account: ``available = limit - settled - reserved``."""

    dimension: BudgetDimension
    limit: int
    reserved: int
    settled: int

    @property
    def available(self) -> int:
        return self.limit - self.settled - self.reserved


class Reservation(Model):
    """An amount held against an account until it is settled with the real usage."""

    reservation_id: str
    tenant_id: str
    run_id: str
    scope: str
    dimension: BudgetDimension
    amount: int
    state: str
    used: int | None = None
