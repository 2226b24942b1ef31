"""What every coordinator flow is handed: built once by ``main.py`` (or a test)."""

from __future__ import annotations

from dataclasses import dataclass, field

from ira.coordinator.config import WorkflowConfig
from ira.core.clock import Clock
from ira.core.ports import TicketSystem
from ira.runtime.fault import FaultPoints
from ira.runtime.store.database import Database


@dataclass(frozen=True)
class Deps:
    db: Database
    clock: Clock
    config: WorkflowConfig
    tickets: TicketSystem
    faults: FaultPoints = field(default_factory=FaultPoints)
    """Armed only by fault tests (``IRA_FAULTS``): where this process kills itself."""
