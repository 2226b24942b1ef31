"""Benchmark: the durable cost of one step, claim -> fenced commit -> release, for a handler
that does nothing (what every coordinator and agent step pays on top of its own work), and
LangGraph's per-superstep checkpoint cost on the same database in the same run (the slope of a
chain of no-op supersteps, bench/engine_langgraph.py), with the ratio.

Usage: python bench/steps.py [--ops N] [--database-url postgresql://...]  (JSON lines on stdout)
LangGraph comes from the ``bench`` extra; without it only ira is measured.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import statistics
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
    took, cpu = [], []
    for _ in range(samples):
        wake = await one_step_run(db, clock)
        started, started_cpu = time.perf_counter(), time.process_time()
        await dispatcher.handle_wakeup(wake)
        took.append((time.perf_counter() - started) * 1000)
        cpu.append((time.process_time() - started_cpu) * 1000)
    # CPU time (this process, every thread) is the figure that survives a shared, loaded machine:
    # wall time there measures the scheduler as much as the step.
    return {"attempts": samples, "claim_to_commit_p50_ms": round(percentile(took, 0.5), 2),
            "claim_to_commit_p99_ms": round(percentile(took, 0.99), 2),
            "cpu_ms_per_step": round(statistics.fmean(cpu), 3)}



async def measure(backend: str, url: str, ops: int) -> dict[str, object]:
    schema = f"bench_steps_{time.time_ns()}" if backend == "postgresql" else None
    if schema:
        conn = await asyncpg.connect(url)
        await conn.execute(f'CREATE SCHEMA "{schema}"')
        await conn.close()
    db = Database.create(url, schema=schema)
    try:
        await upgrade(db)
        return {"bench": "steps", "backend": backend, "system": "ira", **await noop_overhead(db, samples=ops)}
    finally:
        await db.close()
        if schema:
            conn = await asyncpg.connect(url)
            await conn.execute(f'DROP SCHEMA "{schema}" CASCADE')
            await conn.close()


def slope(points: dict[int, float]) -> float:
    """Least-squares ms per step of (chain length, ms): the fixed cost of a run drops out."""
    xs, ys = list(points), list(points.values())
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sum((x - mx) ** 2 for x in xs)


async def langgraph_step_ms(backend: str, url: str | None, workdir: Path, *, repeats: int) -> float:
    """LangGraph's per-superstep cost on the same database: the slope of chains of 2, 10, 30."""
    from engine_langgraph import chain_ms, saver

    async with saver(backend, url, workdir) as checkpointer:
        await chain_ms(checkpointer, 2, durability="sync")  # warm-up
        points = {n: statistics.median([await chain_ms(checkpointer, n, durability="sync") for _ in range(repeats)])
                  for n in (2, 10, 30)}
    return slope(points)


async def main(args: argparse.Namespace) -> None:
    with_langgraph = importlib.util.find_spec("langgraph") is not None
    with tempfile.TemporaryDirectory(prefix="ira-bench-") as tmp:
        targets = [("sqlite", f"sqlite:///{Path(tmp) / 'steps.db'}")]
        targets += [("postgresql", args.database_url)] if args.database_url else []
        for backend, url in targets:
            print(f"{backend}: {args.ops} no-op steps", file=sys.stderr, flush=True)
            ira = await measure(backend, url, args.ops)
            print(json.dumps(ira), flush=True)
            if not with_langgraph:
                print(json.dumps({"bench": "steps", "backend": backend, "langgraph": "not installed (bench extra)"}))
                continue
            lg = await langgraph_step_ms(backend, url if backend == "postgresql" else None, Path(tmp),
                                         repeats=args.repeats)
            print(json.dumps({"bench": "steps", "backend": backend, "system": "langgraph",
                              "superstep_ms": round(lg, 3)}), flush=True)
            print(json.dumps({"bench": "steps", "backend": backend, "ratio_ira_to_langgraph":
                              round(ira["claim_to_commit_p50_ms"] / lg, 2) if lg > 0 else None}), flush=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ops", type=int, default=500)
    parser.add_argument("--database-url", help="also measure PostgreSQL, e.g. postgresql://postgres@127.0.0.1/test")
    parser.add_argument("--repeats", type=int, default=5, help="LangGraph chains per length (the median counts)")
    asyncio.run(main(parser.parse_args()))
