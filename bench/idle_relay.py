"""Benchmark: what an idle outbox relay costs (JSON lines).

Usage: python bench/idle_relay.py [--database-url postgresql://...] [--poll-ms 10] [--seconds 5]

A relay with nothing to send polls every ``--poll-ms`` against an empty, migrated database
(SQLite in a temporary directory, or the PostgreSQL at ``--database-url``); this process's CPU
(percent of one core) over ``--seconds`` after a second's warm-up. The database server's own
CPU (PostgreSQL) is not counted. Production polls every 200 ms (``runtime.relay_poll_interval``);
bench/engine.py's stack every 10 ms.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
import time
from collections.abc import Sequence
from datetime import timedelta

from ira.core.clock import SystemClock
from ira.core.ports import RawRecord
from ira.runtime.relay import OutboxRelay
from ira.runtime.store.database import Database
from ira.runtime.store.migrate import upgrade
from ira.runtime.wiring import RELAY_LANES


class NoBroker:
    """The relay's publisher; an idle relay never calls it."""

    async def publish_raw(self, topic: str, key: str, value: bytes, headers: object) -> object:
        raise AssertionError("an idle relay published")

    async def publish_raw_many(self, records: Sequence[RawRecord], *, pack: object = ()) -> list[object]:
        raise AssertionError("an idle relay published")


async def measure(args: argparse.Namespace) -> dict[str, object]:
    with tempfile.TemporaryDirectory() as workdir:
        db = Database.create(args.database_url or f"sqlite:///{workdir}/ira.db")
        try:
            await upgrade(db)
            relay = OutboxRelay(db=db, publisher=NoBroker(), clock=SystemClock(),
                                poll_interval=timedelta(milliseconds=args.poll_ms),
                                lanes=[[t.value for t in lane] for lane in RELAY_LANES])
            stop = asyncio.Event()
            task = asyncio.create_task(relay.run(stop))
            await asyncio.sleep(1.0)  # warm-up: connections opened, statements prepared
            cpu, wall = time.process_time(), time.monotonic()
            await asyncio.sleep(args.seconds)  # the measured window
            cpu, wall = time.process_time() - cpu, time.monotonic() - wall
            stop.set()
            await task
        finally:
            await db.close()
    return {"bench": "idle_relay", "backend": db.dialect, "poll_ms": args.poll_ms, "seconds": round(wall, 2),
            "cpu_pct_of_core": round(100 * cpu / wall, 2)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--database-url", default=None)
    parser.add_argument("--poll-ms", type=float, default=10.0)
    parser.add_argument("--seconds", type=float, default=5.0)
    print(json.dumps(asyncio.run(measure(parser.parse_args()))), flush=True)


if __name__ == "__main__":
    main()
