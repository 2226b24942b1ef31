"""The set of read-only connectors an investigator is bound to.

Live connectors answer any window. A recording answers relative to the window it was made
in, so a recorded set is *anchored* to each branch's window before use (``for_window``).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING

from ira.core.investigation import BranchBinding
from ira.core.ports import ChangeSource, LogSource, MetricSource, RunbookSource

if TYPE_CHECKING:
    from ira.connectors.recorded_models import RecordedModels


@dataclass(frozen=True)
class ConnectorSet:
    """Which system serves each kind of question; None means not configured."""

    metrics: MetricSource | None = None
    logs: LogSource | None = None
    runbooks: RunbookSource | None = None
    changes: ChangeSource | None = None
    models: RecordedModels | None = None
    """Recorded model answers (a replay of an LLM investigation); None: a policy asks its provider."""
    origin: str = "live"
    """``live`` or ``recorded:<bundle id>``: written on every observation."""
    anchor: Callable[[datetime], ConnectorSet] | None = None
    """For recordings: the same connectors, shifted so the recording ends at the given time."""

    route: Callable[[BranchBinding], Awaitable[ConnectorSet | None]] | None = None
    """Chooses other connectors for some bindings (a staging replay's recording); None: these."""

    def for_window(self, window_end: datetime) -> ConnectorSet:
        return self if self.anchor is None else self.anchor(window_end)

    async def for_binding(self, binding: BranchBinding) -> ConnectorSet:
        """The connectors a branch with ``binding`` uses, anchored to its window."""
        chosen = (await self.route(binding) if self.route is not None else None) or self
        return chosen.for_window(binding.window_end)
