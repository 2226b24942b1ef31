"""Store benchmark: transitions/s (CAS + event + outbox, one transaction) and claims/s.

Usage: python bench/store.py [--database-url URL ...] [--ops N] [--concurrency C]
Prints one JSON line per measurement on stdout; progress on stderr. Not a test: no
thresholds, just figures to compare across changes and machines.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta

import asyncpg

from ira.core.commit import EventDraft, NewRun, NewStep, RunCommit
from ira.core.events import RunEventType
from ira.core.ids import new_id
from ira.core.states import StepState
from ira.runtime.store import runs, steps
from ira.runtime.store.database import Database
from ira.runtime.store.migrate import upgrade
from ira.runtime.wakeup import step_wakeup

NOW = datetime.now(UTC)


def progress(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


async def open_db(url: str) -> tuple[Database, Callable[[], Awaitable[None]]]:
    if url.startswith("sqlite"):
        db = Database.create(url)
        await upgrade(db)
        return db, db.close
    schema = f"bench_{uuid.uuid4().hex[:8]}"
    raw = url.replace("postgresql+asyncpg", "postgresql")
    conn = await asyncpg.connect(raw)
    await conn.execute(f'CREATE SCHEMA "{schema}"')
    await conn.close()
    db = Database.create(url, schema=schema, pool_size=40)
    await upgrade(db)

    async def cleanup() -> None:
        await db.close()
        c = await asyncpg.connect(raw)
        await c.execute(f'DROP SCHEMA "{schema}" CASCADE')
        await c.close()

    return db, cleanup


async def make_runs(db: Database, count: int) -> list[str]:
    ids = []
    async with db.transaction() as conn:
        for _ in range(count):
            run_id = new_id("run")
            await runs.create_run(conn, NewRun(
                tenant_id="bench", run_id=run_id, task_id=new_id("task"), task_kind="diagnose",
                subject_ref="incident:x", workflow="incident-diagnosis@1",
                steps=(NewStep(step_id="metrics", kind="metrics", state=StepState.READY),)), at=NOW)
            ids.append(run_id)
    return ids


async def transition(db: Database, run_id: str) -> None:
    """One accepted change: read version, CAS, one event, one outbox wake-up."""
    async with db.transaction() as conn:
        run = await runs.get_run(conn, "bench", run_id)
        await runs.commit(conn, RunCommit(
            tenant_id="bench", run_id=run_id, expected_version=run.state_version,
            events=(EventDraft(type=RunEventType.AGENT_TURN),),
            outbox=(step_wakeup("bench", run_id, "metrics", kind="metrics", environment="prod", at=NOW),)), at=NOW)


async def transition_batch(db: Database, run_ids: list[str]) -> None:
    """The same changes, many per transaction: what a batched consumer does."""
    async with db.transaction() as conn:
        for run_id in run_ids:
            run = await runs.get_run(conn, "bench", run_id)
            await runs.commit(conn, RunCommit(
                tenant_id="bench", run_id=run_id, expected_version=run.state_version,
                events=(EventDraft(type=RunEventType.AGENT_TURN),),
                outbox=(step_wakeup("bench", run_id, "metrics", kind="metrics", environment="prod", at=NOW),)),
                at=NOW)


async def measure_batched(db: Database, run_ids: list[str], ops: int, batch: int) -> float:
    started = time.perf_counter()
    for start in range(0, ops, batch):
        await transition_batch(db, [run_ids[i % len(run_ids)] for i in range(start, min(start + batch, ops))])
    rate = ops / (time.perf_counter() - started)
    progress(f"  transitions, {batch} per transaction: {rate:,.0f}/s")
    return rate


async def claim(db: Database, run_id: str) -> None:
    async with db.transaction() as conn:
        got = await steps.claim_step(conn, "bench", run_id, "metrics", owner="bench", lease=timedelta(minutes=5),
                                     now=NOW)
    assert got is not None


async def measure(name: str, op: Callable[[str], Awaitable[None]], run_ids: list[str], ops: int,
                  concurrency: int) -> float:
    queue = [run_ids[i % len(run_ids)] for i in range(ops)]

    async def worker(k: int) -> None:
        for i in range(k, len(queue), concurrency):
            await op(queue[i])

    started = time.perf_counter()
    await asyncio.gather(*(worker(k) for k in range(concurrency)))
    rate = ops / (time.perf_counter() - started)
    progress(f"  {name}: {rate:,.0f}/s")
    return rate


async def bench(url: str, ops: int, concurrency: int) -> None:
    db, cleanup = await open_db(url)
    backend = db.dialect
    try:
        for c in sorted({1, concurrency}):
            run_ids = await make_runs(db, max(ops, 50))
            progress(f"{backend} concurrency {c}")
            # distinct runs per worker keep CAS conflicts out: this measures the store, not contention
            t_rate = await measure("transitions", lambda r, d=db: transition(d, r), run_ids, ops, c)
            c_rate = await measure("claims", lambda r, d=db: claim(d, r), run_ids[:ops], ops, c)
            print(json.dumps({"bench": "store", "backend": backend, "concurrency": c, "ops": ops,
                              "transitions_per_s": round(t_rate), "claims_per_s": round(c_rate)}), flush=True)
        run_ids = await make_runs(db, 50)
        b_rate = await measure_batched(db, run_ids, ops, batch=50)
        print(json.dumps({"bench": "store", "backend": backend, "batch": 50, "ops": ops,
                          "batched_transitions_per_s": round(b_rate)}), flush=True)
    finally:
        await cleanup()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--database-url", action="append", help="repeatable; default: a temp SQLite file and "
                        "postgresql://postgres@127.0.0.1:5432/test")
    parser.add_argument("--ops", type=int, default=1000)
    parser.add_argument("--concurrency", type=int, default=8)
    args = parser.parse_args()
    urls = args.database_url or [f"sqlite:///{tempfile.mkdtemp()}/bench.db", "postgresql://postgres@127.0.0.1:5432/test"]
    for url in urls:
        try:
            asyncio.run(bench(url, args.ops, args.concurrency))
        except OSError as exc:
            progress(f"skipping {url}: {exc}")


if __name__ == "__main__":
    main()
