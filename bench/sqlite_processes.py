"""SQLite with writers in several processes: transitions/s and transaction latency (JSON lines).

Usage: python bench/sqlite_processes.py [--processes P] [--ops N] [--concurrency C]

``ira dev`` runs triage in a child process (``dev.processes``) on the same SQLite file as the
roles in the main process, so write transactions of two processes take turns on SQLite's one
write lock. A transaction whose process finds the lock taken waits for it
(``sqlite_driver.begin_writing``); how it waits decides how long the lock sits free between
two writers. Each process here runs N read + CAS + event + outbox transactions (bench/store.py's
``transition``), C at a time, on runs of its own; the parent prints each process's rate and
latency and the total. ``--processes 1`` is the baseline without contention.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.store import make_runs, progress, transition  # noqa: E402
from ira.runtime.store.database import Database  # noqa: E402
from ira.runtime.store.migrate import upgrade  # noqa: E402


async def child(url: str, ops: int, concurrency: int) -> None:
    """One writer process: its own runs, ``ops`` transitions, ``concurrency`` at a time."""
    db = Database.create(url)
    try:
        run_ids = await make_runs(db, max(concurrency, 50))
        took: list[float] = []

        async def worker(k: int) -> None:
            for i in range(k, ops, concurrency):
                started = time.perf_counter()
                await transition(db, run_ids[i % len(run_ids)])
                took.append(time.perf_counter() - started)

        started = time.perf_counter()
        await asyncio.gather(*(worker(k) for k in range(concurrency)))
        seconds = time.perf_counter() - started
        took.sort()
        print(json.dumps({"ops": ops, "seconds": round(seconds, 3), "per_s": round(ops / seconds, 1),
                          "p50_ms": round(statistics.median(took) * 1000, 2),
                          "p99_ms": round(took[min(len(took) - 1, int(len(took) * 0.99))] * 1000, 2)}), flush=True)
    finally:
        await db.close()


async def parent(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        url = f"sqlite+aiosqlite:///{tmp}/bench.db"
        db = Database.create(url)
        await upgrade(db)
        await db.close()
        progress(f"{args.processes} writer process(es), {args.ops} transitions each, {args.concurrency} at a time")
        children = [await asyncio.create_subprocess_exec(
            sys.executable, __file__, "--child", url, "--ops", str(args.ops), "--concurrency", str(args.concurrency),
            stdout=asyncio.subprocess.PIPE) for _ in range(args.processes)]
        started = time.perf_counter()
        outputs = [await c.communicate() for c in children]
        seconds = time.perf_counter() - started
        if any(c.returncode for c in children):
            raise SystemExit("a writer process failed")
        each = [json.loads(out) for out, _ in outputs]
        print(json.dumps({"bench": "sqlite_processes", "processes": args.processes, "concurrency": args.concurrency,
                          "ops_per_process": args.ops, "total_per_s": round(args.processes * args.ops / seconds, 1),
                          "p50_ms": [e["p50_ms"] for e in each], "p99_ms": [e["p99_ms"] for e in each],
                          "per_process_per_s": [e["per_s"] for e in each]}), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--processes", type=int, default=2)
    parser.add_argument("--ops", type=int, default=1000, help="transitions per process")
    parser.add_argument("--concurrency", type=int, default=4, help="transactions in flight per process")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        asyncio.run(child(args.child, args.ops, args.concurrency))
    else:
        asyncio.run(parent(args))


if __name__ == "__main__":
    main()
