"""Benchmark: ira's durable run engine and LangGraph side by side, in one run (JSON lines).

Usage: python bench/engine.py [--ops N] [--probe P] [--database-url postgresql://...] [--full]

Both drive the same shape (3 instant branches -> join -> synthesize -> approval wait ->
ticket -> complete -> notify) with durable state on the same database, per backend (SQLite;
PostgreSQL with ``--database-url``), taking turns sample by sample (chains, one-at-a-time
runs) and measure by measure (burst, approve), so a busy machine weighs on both alike.
LangGraph runs in a child process with an event loop of its own:

* ``step``      per-step durable overhead: the slope of a chain of N no-op steps' time over N
                (ira: claim -> fenced commit that readies the next step -> release, and the
                wake-up's way to the next claim; LangGraph: one superstep + its checkpoint).
* ``sequential`` runs to the approval wait one at a time: runs/s and p50; for ira also the
                run request's hop (``broker_hop_ms``: publish -> the run's creation, p50 and
                mean; the embedded broker holds a record until the fetch in flight has waited
                its ``fetch_wait``) and the runs/s its engine made once there
                (``runs_per_s_from_created``: a diagnostic, not the goal's figure).
* ``burst``     N runs started at once (``--ops``; 1,000 with ``--full``): runs/s, p50/p99
                start -> waiting.
* ``approve``   every waiting run approved at once -> completed: runs/s.
* ``memory``    with ``--waiting W`` (10,000 with ``--full``): RSS and asyncio tasks of a fresh
                process holding W runs at the approval wait (each system in its own process).

On PostgreSQL both first take ``--settle`` runs (300) to the end and the database is analyzed
(see ``settle``). With the server on this machine, ``sequential``, ``burst`` and ``approve`` also
give the server's CPU per run (``db_server_cpu_ms_per_run``, bench/server_cpu.py) for each system.
Each measure ends with a ``ratio`` line (ira / LangGraph) and whether issue #14's goal is met.
LangGraph comes from the ``bench`` extra (``pip install -e '.[bench]'``); without it a line
says so and only ira is measured.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import importlib.util
import json
import statistics
import sys
import tempfile
from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any, Protocol

import runs as incident_runs
import server_cpu
from engine_ira import ira_engine, settled

from ira.infra.tansu import EmbeddedKafka
from ira.runtime.bus.admin import ensure_topics

HAS_LANGGRAPH = all(importlib.util.find_spec(m) is not None for m in (
    "langgraph", "langgraph.checkpoint.sqlite", "langgraph.checkpoint.postgres"))
GOALS: dict[str, tuple[str, str, float]] = {
    # measure -> (figure, "le"/"ge", goal on the ratio ira / LangGraph)
    "step": ("ms_per_step", "le", 1.0),
    "sequential": ("runs_per_s", "ge", 1.0),
    "burst": ("runs_per_s", "ge", 1.0),
    "approve": ("runs_per_s", "ge", 1.0),
}


def emit(**fields: object) -> None:
    print(json.dumps({"bench": "engine", **fields}), flush=True)


def progress(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def percentile(values: list[float], q: float) -> float:
    return incident_runs.percentile(values, q)


def slope(points: dict[int, float]) -> float:
    """Least-squares ms per step of (chain length, ms): the fixed cost of a run drops out."""
    xs, ys = list(points), list(points.values())
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sum((x - mx) ** 2 for x in xs)


class Engine(Protocol):
    """What each side offers the measures (bench/engine_ira.py, bench/engine_langgraph.py)."""

    async def chain_ms(self, length: int) -> float: ...
    async def one_run_ms(self) -> float: ...
    async def burst(self, count: int) -> tuple[list[float], float]: ...
    async def approve_all(self) -> tuple[int, float]: ...


def run_figures(latencies: list[float], seconds: float) -> dict[str, float]:
    return {"runs": len(latencies), "runs_per_s": round(len(latencies) / seconds, 1),
            "p50_ms": round(percentile(latencies, 0.5), 1), "p99_ms": round(percentile(latencies, 0.99), 1)}


def hop_figures(hops: list[float] | None, latencies: list[float]) -> dict[str, Any]:
    """The run request's hop of the runs measured one at a time (``IraEngine.hops``), and the
    runs/s from their runs' creation on: how much of ira's one-at-a-time figure is the embedded
    broker's fetch wait rather than the engine. Nothing for a system without one."""
    if not hops or len(hops) != len(latencies):
        return {}
    return {"broker_hop_ms": {"p50": round(percentile(hops, 0.5), 2), "mean": round(statistics.fmean(hops), 2)},
            "runs_per_s_from_created": round(len(latencies) * 1000 / (sum(latencies) - sum(hops)), 1)}


async def alternating(engines: dict[str, Engine], sample: Callable[[Engine], Awaitable[float]], times: int,
                      backend: str) -> tuple[dict[str, list[float]], dict[str, float | None]]:
    """``times`` samples per system, taking turns: both see the same moments of a busy machine;
    and per system the local PostgreSQL server's CPU seconds over its samples (None: not measured,
    ``server_cpu.before``)."""
    samples: dict[str, list[float]] = {name: [] for name in engines}
    server: dict[str, float | None] = {name: 0.0 for name in engines}
    for _ in range(times):
        for name, engine in engines.items():
            before = server_cpu.before(backend)
            samples[name].append(await sample(engine))
            spent, total = server_cpu.spent(before), server[name]
            server[name] = None if spent is None or total is None else total + spent
    return samples, server


async def settle(engines: dict[str, Engine], backend: str, args: argparse.Namespace) -> None:
    """PostgreSQL: each system takes ``--settle`` runs to the end, then the database is analyzed,
    so both are measured as a database that has held runs is planned, not as a fresh schema is.

    A fresh schema has no statistics: PostgreSQL plans a point lookup by whichever index looks
    as cheap (ira's runs read by ``(tenant_id, state)``'s tenant prefix, every run of the
    tenant, instead of by their key; its budget accounts likewise), and its generic plans keep
    that while the tables grow: ~10,000 rows read per run once a few hundred runs existed, the
    server's CPU per run doubled. A real database is analyzed by autovacuum within a minute of
    growing; analyzing right after creating the schema would only trade those scans for
    sequential ones (statistics of a near-empty table)."""
    if backend == "postgresql" and args.settle:
        progress(f"  settling: {args.settle} runs of each of {', '.join(engines)} to the end, then ANALYZE")
    await settled(engines.values(), backend, args.database_url, args.settle)


async def measure_all(engines: dict[str, Engine], backend: str, args: argparse.Namespace
                      ) -> dict[str, dict[str, dict[str, Any]]]:
    """system -> measure -> figures."""
    out: dict[str, dict[str, dict[str, Any]]] = {name: {} for name in engines}
    points: dict[str, dict[int, float]] = {name: {} for name in engines}
    for n in args.chain:
        for name, ms in (await alternating(engines, lambda e, n=n: e.chain_ms(n), args.repeats, backend))[0].items():
            points[name][n] = statistics.median(ms)
    for name, by_length in points.items():
        chain_ms = {str(n): round(ms, 2) for n, ms in by_length.items()}
        out[name]["step"] = {"ms_per_step": round(slope(by_length), 3), "chain_ms": chain_ms}
    sequential, server = await alternating(engines, lambda e: e.one_run_ms(), args.probe, backend)
    for name, ms in sequential.items():
        out[name]["sequential"] = {**run_figures(ms, sum(ms) / 1000), **server_cpu.figure(server[name], len(ms)),
                                   **hop_figures(getattr(engines[name], "hops", None), ms)}
    for name, engine in engines.items():
        progress(f"  burst of {args.ops}: {name}")
        before = server_cpu.before(backend)
        burst, seconds = await engine.burst(args.ops)
        out[name]["burst"] = {**run_figures(burst, seconds), **server_cpu.per_run(before, len(burst))}
        if len(burst) < args.ops:  # the rest were still on their way: a p99 of those that arrived would flatter
            out[name]["burst"].update(p99_ms=None, incomplete=f"{len(burst)} of {args.ops} within the timeout")
    for name, engine in engines.items():
        before = server_cpu.before(backend)
        runs, seconds = await engine.approve_all()
        out[name]["approve"] = {"runs": runs, "runs_per_s": round(runs / seconds, 1),
                                **server_cpu.per_run(before, runs)}
    return out


def compare(backend: str, measure: str, ira: dict[str, Any], langgraph: dict[str, Any]) -> None:
    figure, direction, goal = GOALS[measure]
    if ira[figure] <= 0 or langgraph[figure] <= 0:  # a slope lost in noise: too few repeats
        emit(backend=backend, measure=measure, kind="ratio", figure=figure, ira=ira[figure],
             langgraph=langgraph[figure], ratio_ira_over_langgraph=None, met=None, note="noise: raise --repeats")
        return
    ratio = ira[figure] / langgraph[figure]
    met = ratio <= goal if direction == "le" else ratio >= goal
    emit(backend=backend, measure=measure, kind="ratio", figure=figure, ira=ira[figure], langgraph=langgraph[figure],
         ratio_ira_over_langgraph=round(ratio, 3), goal=f"{'<=' if direction == 'le' else '>='} {goal}", met=met)


def absolute_goals(backend: str, ira: dict[str, dict[str, Any]]) -> None:
    """Issue #14's goals that are figures, not ratios."""
    p99 = ira["burst"]["p99_ms"]
    emit(backend=backend, measure="burst", kind="goal", figure="p99_ms", ira=p99, goal="<= 2000",
         met=p99 is not None and p99 <= 2000)
    emit(backend=backend, measure="approve", kind="goal", figure="runs_per_s", ira=ira["approve"]["runs_per_s"],
         goal=">= 200", met=ira["approve"]["runs_per_s"] >= 200)


def emit_figures(backend: str, system: str, measures: dict[str, dict[str, Any]]) -> None:
    for measure, values in measures.items():
        emit(backend=backend, measure=measure, system=system, **values)


async def side_by_side(backend: str, args: argparse.Namespace, workdir: Path, bootstrap: str) -> None:
    """Both systems up at once on fresh databases, taking turns measure by measure. LangGraph runs
    in a child process: ira's relay, consumers and scanner must not share its event loop."""
    async with AsyncExitStack() as stack:
        engines: dict[str, Engine] = {}
        if HAS_LANGGRAPH:
            from engine_langgraph import RemoteLangGraph

            engines["langgraph"] = await stack.enter_async_context(RemoteLangGraph.start(
                [sys.executable, __file__, "--serve-langgraph", *child_args(backend, args)]))
        engines["ira"] = await stack.enter_async_context(ira_engine(backend, args.database_url, workdir, bootstrap))
        progress(f"{backend}: {', '.join(engines)}")
        await settle(engines, backend, args)
        figures = await measure_all(engines, backend, args)
    for system, measures in figures.items():
        emit_figures(backend, system, measures)
    for measure in GOALS if "langgraph" in figures else ():
        compare(backend, measure, figures["ira"][measure], figures["langgraph"][measure])
    absolute_goals(backend, figures["ira"])


def child_args(backend: str, args: argparse.Namespace) -> list[str]:
    return ["--backends", backend] + (["--database-url", args.database_url] if args.database_url else [])


def rss_mb() -> float:
    return incident_runs.rss_mb()


async def memory_of(system: str, backend: str, args: argparse.Namespace, workdir: Path) -> None:
    """In a fresh process: hold ``--waiting`` runs at the approval wait, report RSS and tasks."""
    batches = [min(args.ops, args.waiting - i) for i in range(0, args.waiting, args.ops)]
    if system == "langgraph":
        import engine_langgraph as lg

        async with lg.langgraph_engine(backend, args.database_url, workdir) as engine:
            gc.collect()
            base = rss_mb()
            for size in batches:
                await engine.burst(size)
            gc.collect()
            emit(backend=backend, measure="memory", system=system, waiting_runs=args.waiting,
                 rss_mb_start=round(base, 1), rss_mb_waiting=round(rss_mb(), 1), asyncio_tasks=len(asyncio.all_tasks()))
        return
    async with EmbeddedKafka(workdir / "kafka") as kafka:
        await ensure_topics(kafka.bootstrap, incident_runs.ENV, partitions=args.partitions)
        async with ira_engine(backend, args.database_url, workdir, kafka.bootstrap) as ira:
            gc.collect()
            base, tasks = rss_mb(), len(asyncio.all_tasks())
            for size in batches:
                await ira.burst(size)
            gc.collect()
            emit(backend=backend, measure="memory", system=system, waiting_runs=args.waiting + 1,
                 rss_mb_start=round(base, 1), rss_mb_waiting=round(rss_mb(), 1), asyncio_tasks_start=tasks,
                 asyncio_tasks=len(asyncio.all_tasks()))


async def memory_in_children(backend: str, args: argparse.Namespace) -> None:
    for system in ("langgraph", "ira") if HAS_LANGGRAPH else ("ira",):
        progress(f"{backend}: {args.waiting} runs waiting, {system} (own process)")
        argv = [sys.executable, __file__, "--memory-of", system, "--waiting", str(args.waiting), "--ops", str(args.ops),
                *child_args(backend, args)]
        child = await asyncio.create_subprocess_exec(*argv)
        if await child.wait() != 0:
            raise RuntimeError(f"memory run of {system} on {backend} failed")


async def main(args: argparse.Namespace) -> None:
    backends = args.backends or ["sqlite"] + (["postgresql"] if args.database_url else [])
    with tempfile.TemporaryDirectory(prefix="ira-bench-") as tmp:
        if args.memory_of:
            await memory_of(args.memory_of, backends[0], args, Path(tmp))
            return
        if args.serve_langgraph:
            from engine_langgraph import serve

            await serve(backends[0], args.database_url, Path(tmp))
            return
        if not HAS_LANGGRAPH:
            emit(langgraph="not installed", hint="pip install -e '.[bench]'; measuring ira alone, no ratios")
        async with EmbeddedKafka(Path(tmp) / "kafka") as kafka:
            await ensure_topics(kafka.bootstrap, incident_runs.ENV, partitions=args.partitions)
            for backend in backends:
                await side_by_side(backend, args, Path(tmp), kafka.bootstrap)
    for backend in backends if args.waiting else ():
        await memory_in_children(backend, args)


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ops", type=int, default=200, help="runs in the burst")
    parser.add_argument("--probe", type=int, default=20, help="runs one at a time")
    parser.add_argument("--chain", type=lambda s: [int(n) for n in s.split(",")], default=[2, 10, 30],
                        help="chain lengths for the per-step slope")
    parser.add_argument("--repeats", type=int, default=5, help="chains per length (the median counts)")
    parser.add_argument("--waiting", type=int, default=0, help="runs held waiting for the memory figure")
    parser.add_argument("--full", action="store_true", help="--ops 1000 --waiting 10000")
    parser.add_argument("--database-url", help="also measure PostgreSQL, e.g. postgresql://postgres@127.0.0.1/test")
    parser.add_argument("--backends", type=lambda s: s.split(","), help="default: sqlite, plus postgresql with a URL")
    parser.add_argument("--partitions", type=int, default=3)
    parser.add_argument("--settle", type=int, default=300,
                        help="PostgreSQL: runs each system ends before the measures, then ANALYZE (0: none)")
    parser.add_argument("--memory-of", choices=("ira", "langgraph"), help=argparse.SUPPRESS)
    parser.add_argument("--serve-langgraph", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.full:
        args.ops, args.waiting = max(args.ops, 1000), max(args.waiting, 10_000)
    return args


if __name__ == "__main__":
    asyncio.run(main(parse()))
