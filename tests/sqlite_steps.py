"""Counting the work of SQLite statements: its VM calls a progress handler every N instructions,
so a test can tell an index read from a walk of a table without timing anything."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

from sqlalchemy.ext.asyncio import AsyncConnection


@dataclass
class VmSteps:
    """Hundreds of VM instructions run on the connection while counting."""

    hundreds: int = 0

    def _tick(self) -> int:
        self.hundreds += 1
        return 0  # go on


@asynccontextmanager
async def counting_vm_steps(conn: AsyncConnection) -> AsyncIterator[VmSteps]:
    """Count the VM instructions (in hundreds) the statements run on ``conn`` inside the block."""
    raw = (await conn.get_raw_connection()).dbapi_connection._connection._conn  # type: ignore[union-attr]
    steps = VmSteps()
    raw.set_progress_handler(steps._tick, 100)
    try:
        yield steps
    finally:
        raw.set_progress_handler(None, 0)
