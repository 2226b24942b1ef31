"""Benchmark: CPU per run on the start path, decision -> WAITING(approval), ira alone (JSON lines).

Usage: python bench/start_cpu.py [--ops N] [--probe P] [--database-url postgresql://...]
                                 [--profile out.prof] [--top K]

bench/engine.py's ira engine (coordinator, instant investigators, relay and scanner in this
process, the embedded broker beside it), warmed up (on PostgreSQL also settled: ``--settle``
runs to the end, then ANALYZE, see bench/engine.py), then ``--probe`` runs one at a time and a
burst of ``--ops``. For each: runs/s, p50/p99, this process's CPU ms per run and the kernel's
part of it (``cpu_system_ms_per_run``: sockets, WAL writes; every thread:
the event loop and aiosqlite's connection threads; the broker's CPU is not counted), a local
PostgreSQL server's (``db_server_cpu_ms_per_run``, bench/server_cpu.py) and store
write transactions per run (every ``Database.transaction``: the relay's and scanner's too) and
statements per run (a ``before_cursor_execute`` count). CPU is the figure to compare between
two trees on a shared machine: wall-clock runs/s follows the load beside it, CPU per run much
less. With ``--profile`` the burst runs under cProfile (event loop thread only; its CPU figure
then includes the profiler's cost) and the ``--top`` functions by own time go to stderr.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import json
import os
import pstats
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Any

import runs as incident_runs
import server_cpu
from engine_ira import TENANT, IraEngine, ira_engine, settled
from sqlalchemy import event
from sqlalchemy.ext.asyncio import AsyncConnection

from ira.infra.tansu import EmbeddedKafka
from ira.runtime.bus.admin import ensure_topics
from ira.runtime.store.database import Database


class Statements:
    """Counts statements sent to the database (every connection of the engine's pool). Off
    unless ``--statements``: an engine event sends every statement through SQLAlchemy's event
    dispatch, which costs CPU of its own."""

    def __init__(self, db: Database, on: bool) -> None:
        self.count = 0
        if on:
            event.listen(db.engine.sync_engine, "before_cursor_execute", self._seen)

    def _seen(self, *_: Any) -> None:
        self.count += 1


class WriteTransactions:
    """Counts the write transactions ``db`` begins (one Python call each: always on)."""

    def __init__(self, db: Database) -> None:
        self.count = 0
        begin = db._begin

        def counted() -> AbstractAsyncContextManager[AsyncConnection]:
            self.count += 1
            return begin()

        db._begin = counted  # type: ignore[method-assign]


def emit(**fields: object) -> None:
    print(json.dumps({"bench": "start_cpu", **fields}), flush=True)


async def measured(backend: str, mode: str, statements: Statements, transactions: WriteTransactions,
                   work: Callable[[], Awaitable[list[float]]]) -> None:
    """Run ``work`` (ms per run to the wait), emit runs/s, latencies, CPU, write transactions
    (the relay's and scanner's included) and statements per run."""
    cpu, wall, before, began = os.times(), time.perf_counter(), statements.count, transactions.count
    server = server_cpu.before(backend)
    latencies = await work()
    after, wall = os.times(), time.perf_counter() - wall
    user, system = after.user - cpu.user, after.system - cpu.system
    if not latencies:
        return
    n = max(1, len(latencies))
    emit(backend=backend, mode=mode, runs=len(latencies), runs_per_s=round(len(latencies) / wall, 1),
         p50_ms=round(incident_runs.percentile(latencies, 0.5), 1),
         p99_ms=round(incident_runs.percentile(latencies, 0.99), 1),
         cpu_ms_per_run=round((user + system) * 1000 / n, 2), cpu_system_ms_per_run=round(system * 1000 / n, 2),
         write_txns_per_run=round((transactions.count - began) / n, 2),
         **server_cpu.per_run(server, len(latencies)),
         **({"statements_per_run": round((statements.count - before) / n, 1)} if statements.count else {}))


async def sequential(engine: IraEngine, probe: int) -> list[float]:
    return [await engine.one_run_ms() for _ in range(probe)]


async def burst(engine: IraEngine, ops: int, profile: str | None, top: int) -> list[float]:
    profiler = cProfile.Profile() if profile else None
    if profiler:
        profiler.enable()
    try:
        latencies, _ = await engine.burst(ops)
    finally:
        if profiler:
            profiler.disable()
    if profiler and profile:
        profiler.dump_stats(profile)
        pstats.Stats(profiler, stream=sys.stderr).sort_stats("tottime").print_stats(top)
    return latencies


async def main(args: argparse.Namespace) -> None:
    backends = ["sqlite"] + (["postgresql"] if args.database_url else [])
    with tempfile.TemporaryDirectory(prefix="ira-bench-") as tmp:
        async with EmbeddedKafka(Path(tmp) / "kafka") as kafka:
            await ensure_topics(kafka.bootstrap, incident_runs.ENV, partitions=args.partitions)
            for backend in backends:
                async with ira_engine(backend, args.database_url, Path(tmp), kafka.bootstrap) as engine:
                    statements = Statements(engine.db, args.statements)
                    transactions = WriteTransactions(engine.db)
                    await engine.to_waiting(incident_runs.decisions(5, TENANT))  # warm caches past the first run
                    await settled([engine], backend, args.database_url, args.settle)
                    await measured(backend, "sequential", statements, transactions,
                                   lambda e=engine: sequential(e, args.probe))
                    await measured(backend, "burst", statements, transactions,
                                   lambda e=engine: burst(e, args.ops, args.profile, args.top))


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ops", type=int, default=200, help="runs in the burst")
    parser.add_argument("--probe", type=int, default=20, help="runs one at a time")
    parser.add_argument("--database-url", help="also measure PostgreSQL, e.g. postgresql://postgres@127.0.0.1/test")
    parser.add_argument("--partitions", type=int, default=3)
    parser.add_argument("--settle", type=int, default=300,
                        help="PostgreSQL: runs taken to the end before measuring, then ANALYZE (0: none)")
    parser.add_argument("--statements", action="store_true", help="count statements per run")
    parser.add_argument("--profile", help="cProfile the burst into this file")
    parser.add_argument("--top", type=int, default=60, help="functions printed with --profile")
    return parser.parse_args(argv)


if __name__ == "__main__":
    asyncio.run(main(parse()))
