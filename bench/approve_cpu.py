"""Benchmark: CPU per run on the approve path, approval -> COMPLETED, ira alone (JSON lines).

Usage: python bench/approve_cpu.py [--ops N] [--rounds R] [--database-url postgresql://...]
                                   [--statements] [--profile out.prof] [--top K]

bench/engine.py's ira engine (coordinator, instant investigators, relay and scanner in this
process, the embedded broker beside it), warmed up (on PostgreSQL also settled: ``--settle`` runs
to the end, then ANALYZE, see bench/engine.py); each round takes ``--ops`` runs to their
approval wait and approves them all at once (``IraEngine.approve_all``, as bench/engine.py's
``approve`` measure does). Per round: approved runs/s, this process's CPU ms per approved run
(every thread; the broker's CPU is not counted), the event loop thread's alone, a local
PostgreSQL server's (``db_server_cpu_ms_per_run``, bench/server_cpu.py: what the machine's
other users of that server do is counted too), write
transactions per approved run (the relay's and scanner's included) and, with ``--statements``,
store statements per approved run. CPU per run is the figure to compare
between two trees on a shared machine. With ``--profile`` the last round's approvals run under
cProfile timed by the event loop thread's CPU (``time.thread_time``: a wall-clock profile of a
loaded machine counts other processes' turns).
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import json
import pstats
import sys
import tempfile
import time
from pathlib import Path

import runs as incident_runs
import server_cpu
from engine_ira import TENANT, ira_engine, settled
from start_cpu import Statements, WriteTransactions

from ira.infra.tansu import EmbeddedKafka
from ira.runtime.bus.admin import ensure_topics


def emit(**fields: object) -> None:
    print(json.dumps({"bench": "approve_cpu", **fields}), flush=True)


async def main(args: argparse.Namespace) -> None:
    backends = ["sqlite"] + (["postgresql"] if args.database_url else [])
    with tempfile.TemporaryDirectory(prefix="ira-bench-") as tmp:
        async with EmbeddedKafka(Path(tmp) / "kafka") as kafka:
            await ensure_topics(kafka.bootstrap, incident_runs.ENV, partitions=args.partitions)
            for backend in backends:
                async with ira_engine(backend, args.database_url, Path(tmp), kafka.bootstrap) as engine:
                    statements = Statements(engine.db, args.statements)
                    transactions = WriteTransactions(engine.db)
                    await engine.to_waiting(incident_runs.decisions(5, TENANT))
                    await engine.approve_all()  # warm the approve path's caches
                    await settled([engine], backend, args.database_url, args.settle)
                    for round_ in range(args.rounds):
                        await engine.to_waiting(incident_runs.decisions(args.ops, TENANT))
                        last = round_ == args.rounds - 1
                        profiler = cProfile.Profile(time.thread_time) if args.profile and last else None
                        cpu, loop, before = time.process_time(), time.thread_time(), statements.count
                        began, server = transactions.count, server_cpu.before(backend)
                        if profiler:
                            profiler.enable()
                        runs, seconds = await engine.approve_all()
                        if profiler:
                            profiler.disable()
                        cpu, loop = time.process_time() - cpu, time.thread_time() - loop
                        n = max(1, runs)
                        emit(backend=backend, mode="approve", round=round_, runs=runs,
                             runs_per_s=round(runs / seconds, 1), cpu_ms_per_run=round(cpu * 1000 / n, 2),
                             loop_cpu_ms_per_run=round(loop * 1000 / n, 2),
                             write_txns_per_run=round((transactions.count - began) / n, 2),
                             **server_cpu.per_run(server, runs),
                             **({"statements_per_run": round((statements.count - before) / n, 1)}
                                if statements.count else {}))
                        if profiler and args.profile:
                            profiler.dump_stats(args.profile)
                            pstats.Stats(profiler, stream=sys.stderr).sort_stats("tottime").print_stats(args.top)


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ops", type=int, default=200, help="runs approved at once per round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--database-url", help="also measure PostgreSQL, e.g. postgresql://postgres@127.0.0.1/test")
    parser.add_argument("--partitions", type=int, default=3)
    parser.add_argument("--settle", type=int, default=300,
                        help="PostgreSQL: runs taken to the end before measuring, then ANALYZE (0: none)")
    parser.add_argument("--statements", action="store_true", help="count statements per approved run")
    parser.add_argument("--profile", help="cProfile the last round's approvals into this file")
    parser.add_argument("--top", type=int, default=60, help="functions printed with --profile")
    return parser.parse_args(argv)


if __name__ == "__main__":
    asyncio.run(main(parse()))
