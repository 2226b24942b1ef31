"""What every role is handed: ready clients, built once by the composition root.

Roles never build clients or read the environment themselves; the CLI (``ira dev`` /
``ira worker``) builds one Platform and passes it to each role it starts.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from ira.core.clock import Clock

if TYPE_CHECKING:
    from redis.asyncio import Redis

    from ira.runtime.bus.producer import BusProducer
    from ira.runtime.settings import Settings
    from ira.runtime.store.database import Database
    from ira.runtime.telemetry import Metrics


@dataclass(frozen=True)
class Platform:
    """The shared clients of one process."""

    settings: Settings
    db: Database
    producer: BusProducer
    redis: Redis
    clock: Clock
    metrics: Metrics
    kafka_bootstrap: str
    """Where consumers connect (the embedded broker's address in ``ira dev``)."""
    redis_url: str = ""
    """The URL ``redis`` was built from (the embedded server's in ``ira dev``): for child processes."""
