"""Benchmark: round trips per durable step on PostgreSQL (JSON lines).

Usage: python bench/round_trips.py [--database-url postgresql://...] [--chain 2,30] [--repeats 3]
                                   [--incident N]

bench/engine.py's ira stack (relay, scanner, broker) runs chains of no-op steps; what one step
sends to PostgreSQL is counted in the step's own task (its handler's fenced commit, which also
claims the next step: eager dispatch), so the relay's polls and the bench's own reads are not:

* ``round_trips``  client writes on sockets to the database (asyncpg writes one buffer per
                   request and waits for its answer: a write is a round trip), by first message
                   type (``Q`` simple query: BEGIN/COMMIT/ROLLBACK; ``B`` bind+execute; ``P``
                   prepare). No SQLAlchemy ``before_cursor_execute`` listener counts statements
                   any more: an engine with a listener runs every statement through
                   SQLAlchemy's path (``pg_fast``), where ``write_later`` sends each insert at
                   once, so the counts were not those of ira as it runs;
* ``ms`` / ``cpu_ms`` wall and process CPU per step (noisy on a shared machine; engine.py is the
                   figure to quote).

Per step = the slope between the shortest and the longest chain (a run's fixed cost drops out).

With ``--incident N`` (after the chains): N incident runs (instant investigators: three branches,
join, synthesize, approval) taken one at a time to their approval wait, then approved at once
(``IraEngine.approve_all``); counted in every step's task (``StepDispatcher.run_claimed`` and
``handle_wakeup``: the claims, handlers and their commits) and in the approvals' own transactions,
per run: ``incident_to_waiting`` and ``incident_approve`` (the decision's transaction that
creates the run is a consumer's, not counted).
"""

from __future__ import annotations

import argparse
import asyncio
import contextvars
import json
import statistics
import tempfile
import time
from asyncio import selector_events
from collections import Counter
from pathlib import Path
from typing import Any

import engine_ira
import runs as incident_runs
from sqlalchemy.engine import make_url

from ira.infra.tansu import EmbeddedKafka
from ira.runtime.bus.admin import ensure_topics
from ira.runtime.dispatch import StepDispatcher

_COUNTING = contextvars.ContextVar("counting", default=False)
_SEEN: Counter[str] = Counter()


def _count_writes(port: int) -> None:
    """Count each write to the database's port made in a counting context."""
    write = selector_events._SelectorSocketTransport.write

    def counted(self: Any, data: Any) -> None:
        if _COUNTING.get():
            peer = self.get_extra_info("peername")
            if peer and peer[1] == port:
                _SEEN["round_trips"] += 1
                _SEEN[f"round_trips_{bytes(data[:1]).decode('ascii', 'replace')}"] += 1
        write(self, data)

    selector_events._SelectorSocketTransport.write = counted  # type: ignore[method-assign]


def _count_in_dispatch(counting: list[bool]) -> None:
    """Every step task (claimed in a commit or woken through the broker) counts while ``counting[0]``."""
    run_claimed, handle_wakeup = StepDispatcher.run_claimed, StepDispatcher.handle_wakeup

    async def claimed(self: StepDispatcher, ctx: Any) -> None:
        if counting[0]:
            _COUNTING.set(True)
        await run_claimed(self, ctx)

    async def woken(self: StepDispatcher, envelope: Any) -> None:
        if counting[0]:
            _COUNTING.set(True)
        await handle_wakeup(self, envelope)

    StepDispatcher.run_claimed = claimed  # type: ignore[method-assign]
    StepDispatcher.handle_wakeup = woken  # type: ignore[method-assign]


async def _incident(ira: engine_ira.IraEngine, runs: int, counting: list[bool]) -> dict[str, float]:
    """Round trips and statements per incident run, to the approval wait and approve -> completed."""
    figures: dict[str, float] = {}
    _SEEN.clear()
    counting[0] = True
    for _ in range(runs):
        await ira.one_run_ms()
    counting[0] = False
    figures.update({f"incident_to_waiting_{k}": round(v / runs, 2) for k, v in _SEEN.items()})
    _SEEN.clear()
    counting[0] = True
    token = _COUNTING.set(True)
    try:
        approved, _ = await ira.approve_all()
    finally:
        _COUNTING.reset(token)
        counting[0] = False
    figures.update({f"incident_approve_{k}": round(v / max(approved, 1), 2) for k, v in _SEEN.items()})
    return figures


def _count_in_steps(counting: list[bool]) -> None:
    """A chain step's task counts while ``counting[0]`` (set around the measured chains only)."""
    step = engine_ira.Chains.step

    async def counted(self: engine_ira.Chains, ctx: Any) -> None:
        if counting[0]:
            _COUNTING.set(True)
        await step(self, ctx)

    engine_ira.Chains.step = counted  # type: ignore[method-assign]


async def main(args: argparse.Namespace) -> None:
    counting = [False]
    _count_writes(make_url(args.database_url).port or 5432)
    _count_in_steps(counting)
    if args.incident:
        _count_in_dispatch(counting)
    incident: dict[str, float] = {}
    with tempfile.TemporaryDirectory(prefix="ira-bench-") as tmp:
        async with EmbeddedKafka(Path(tmp) / "kafka") as kafka:
            await ensure_topics(kafka.bootstrap, incident_runs.ENV, partitions=3)
            async with engine_ira.ira_engine("postgresql", args.database_url, Path(tmp), kafka.bootstrap) as ira:
                samples: dict[int, list[dict[str, float]]] = {n: [] for n in args.chain}
                for _ in range(args.repeats):
                    for n in args.chain:
                        _SEEN.clear()
                        counting[0] = True
                        cpu = time.process_time()
                        ms = await ira.chain_ms(n)
                        counting[0] = False
                        samples[n].append({**_SEEN, "ms": ms, "cpu_ms": (time.process_time() - cpu) * 1000})
                if args.incident:
                    incident = await _incident(ira, args.incident, counting)
    short, long = min(args.chain), max(args.chain)
    figures = sorted({k for s in samples[long] for k in s})
    per_step = {k: round((statistics.median(s.get(k, 0) for s in samples[long])
                          - statistics.median(s.get(k, 0) for s in samples[short])) / (long - short), 3)
                for k in figures}
    print(json.dumps({"bench": "round_trips", "backend": "postgresql", "per_step": per_step,
                      "chains": [short, long], "repeats": args.repeats}), flush=True)
    if incident:
        print(json.dumps({"bench": "round_trips", "backend": "postgresql", "per_incident_run": incident,
                          "runs": args.incident}), flush=True)


def parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--database-url", default="postgresql://postgres@127.0.0.1:5432/test")
    parser.add_argument("--chain", type=lambda s: [int(n) for n in s.split(",")], default=[2, 30])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--incident", type=int, default=0, help="incident runs to count (0: none)")
    return parser.parse_args()


if __name__ == "__main__":
    asyncio.run(main(parse()))
