"""Benchmark: the durable cost of one step, claim -> fenced commit -> release, for a handler
that does nothing (what every coordinator and agent step pays on top of its own work).

Usage: python bench/steps.py [--ops N] [--database-url postgresql://...]  (JSON lines on stdout)
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from pathlib import Path

import asyncpg

from ira.core.clock import SystemClock
from ira.core.commit import Fence, NewRun, NewStep, RunCommit, StepChange
from ira.core.envelope import Envelope
from ira.core.ids import new_id
from ira.core.states import StepState
from ira.runtime.dispatch import StepContext, StepDispatcher
from ira.runtime.store import runs as run_store
from ira.runtime.store.database import Database
from ira.runtime.store.migrate import upgrade
from ira.runtime.wakeup import step_wakeup


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


async def one_step_run(db: Database, clock: SystemClock) -> Envelope:
    """A run with one READY step; returns its wake-up."""
    run_id = new_id("run")
    async with db.transaction() as conn:
        await run_store.create_run(conn, NewRun(
            tenant_id="bench", run_id=run_id, task_id=new_id("task"), task_kind="noop", subject_ref="noop",
            workflow="noop@1", steps=(NewStep(step_id="noop", kind="noop", state=StepState.READY),)), at=clock.now())
    return step_wakeup("bench", run_id, "noop", kind="noop", environment="prod", at=clock.now()).envelope


async def noop_overhead(db: Database, *, samples: int) -> dict[str, float]:
    """Claim -> fenced DONE commit -> release check, for one-step runs whose handler does nothing."""
    clock = SystemClock()

    async def done(ctx: StepContext) -> None:
        async with db.transaction() as conn:
            run = await run_store.get_run(conn, ctx.claim.tenant_id, ctx.claim.run_id)
            await run_store.commit(conn, RunCommit(
                tenant_id=run.tenant_id, run_id=run.run_id, expected_version=run.state_version,
                fence=Fence(step_id="noop", owner_epoch=ctx.claim.owner_epoch),
                steps=(StepChange(step_id="noop", state=StepState.DONE),)), at=clock.now())

    dispatcher = StepDispatcher(db=db, clock=clock, handlers={"noop": done}, owner="bench-noop")
    took = []
    for _ in range(samples):
        wake = await one_step_run(db, clock)
        started = time.perf_counter()
        await dispatcher.handle_wakeup(wake)
        took.append((time.perf_counter() - started) * 1000)
    return {"attempts": samples, "claim_to_commit_p50_ms": round(percentile(took, 0.5), 2),
            "claim_to_commit_p99_ms": round(percentile(took, 0.99), 2)}



async def measure(backend: str, url: str, ops: int) -> dict[str, object]:
    schema = f"bench_steps_{time.time_ns()}" if backend == "postgresql" else None
    if schema:
        conn = await asyncpg.connect(url)
        await conn.execute(f'CREATE SCHEMA "{schema}"')
        await conn.close()
    db = Database.create(url, schema=schema)
    try:
        await upgrade(db)
        return {"bench": "steps", "backend": backend, **await noop_overhead(db, samples=ops)}
    finally:
        await db.close()
        if schema:
            conn = await asyncpg.connect(url)
            await conn.execute(f'DROP SCHEMA "{schema}" CASCADE')
            await conn.close()


async def main(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory(prefix="ira-bench-") as tmp:
        targets = [("sqlite", f"sqlite:///{Path(tmp) / 'steps.db'}")]
        targets += [("postgresql", args.database_url)] if args.database_url else []
        for backend, url in targets:
            print(f"{backend}: {args.ops} no-op steps", file=sys.stderr, flush=True)
            print(json.dumps(await measure(backend, url, args.ops)), flush=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ops", type=int, default=500)
    parser.add_argument("--database-url", help="also measure PostgreSQL, e.g. postgresql://postgres@127.0.0.1/test")
    asyncio.run(main(parser.parse_args()))
