"""The LangGraph side of bench/engine.py: the same shape as ira's incident run, with instant nodes.

``metrics``, ``logs`` and ``runbooks`` fan out from START, ``join`` waits for all three,
``synthesize`` drafts, ``approve`` interrupts (the approval wait), then ``create_ticket`` ->
``complete`` -> ``notify``. Checkpoints go to LangGraph's own savers on the same database as
ira's store: ``AsyncSqliteSaver`` (a file) or ``AsyncPostgresSaver`` (a pool, in a throwaway
schema). ``durability="sync"`` saves each superstep's checkpoint before the next superstep
starts, which is what ira's commits do (LangGraph's default, ``async``, lets the save overlap
the next step: not durable at the step).

Imported only when the ``bench`` extra is installed (``pip install -e '.[bench]'``).
"""

from __future__ import annotations

import asyncio
import json
import operator
import sys
import time
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Annotated, Any, TypedDict

import asyncpg
from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver
from langgraph.graph import END, START, StateGraph
from langgraph.types import Command, interrupt
from psycopg.rows import dict_row
from psycopg_pool import AsyncConnectionPool

BRANCHES = ("metrics", "logs", "runbooks")


class Incident(TypedDict, total=False):
    incident_id: str
    evidence: Annotated[list[str], operator.add]
    report: str
    approved: bool
    ticket: str
    outcome: str
    notified: bool


def _branch(name: str) -> Callable[[Incident], dict[str, Any]]:
    def investigate(state: Incident) -> dict[str, Any]:
        return {"evidence": [f"{name}: p99 latency tripled after deploy"]}
    return investigate


def _approve(state: Incident) -> dict[str, Any]:
    answer = interrupt({"draft": state["report"]})
    return {"approved": answer == "approve"}


def incident_graph(checkpointer: Any) -> Any:
    """3 branches -> join -> synthesize -> approve (interrupt) -> create_ticket -> complete -> notify."""
    g = StateGraph(Incident)
    for name in BRANCHES:
        g.add_node(name, _branch(name))
        g.add_edge(START, name)
    g.add_node("join", lambda s: {})
    g.add_node("synthesize", lambda s: {"report": "; ".join(sorted(s["evidence"]))})
    g.add_node("approve", _approve)
    g.add_node("create_ticket", lambda s: {"ticket": f"INC-{s['incident_id'][-6:]}"} if s["approved"] else {})
    g.add_node("complete", lambda s: {"outcome": "completed" if s.get("ticket") else "rejected"})
    g.add_node("notify", lambda s: {"notified": True})
    g.add_edge(list(BRANCHES), "join")
    for a, b in (("join", "synthesize"), ("synthesize", "approve"), ("approve", "create_ticket"),
                 ("create_ticket", "complete"), ("complete", "notify"), ("notify", END)):
        g.add_edge(a, b)
    return g.compile(checkpointer=checkpointer)


class Counter(TypedDict):
    done: int
    length: int


def chain_graph(checkpointer: Any) -> Any:
    """One no-op node that runs again until it ran ``length`` times: one superstep (and one
    checkpoint) each, on a graph whose size does not grow with the chain (as an agent loop)."""
    g = StateGraph(Counter)
    g.add_node("step", lambda s: {"done": s["done"] + 1})
    g.add_edge(START, "step")
    g.add_conditional_edges("step", lambda s: END if s["done"] >= s["length"] else "step")
    return g.compile(checkpointer=checkpointer)


@asynccontextmanager
async def saver(backend: str, url: str | None, workdir: Path) -> AsyncIterator[Any]:
    """A checkpointer on a fresh SQLite file or a fresh PostgreSQL schema (dropped afterwards)."""
    if backend == "sqlite":
        async with AsyncSqliteSaver.from_conn_string(str(workdir / f"lg-{uuid.uuid4().hex[:8]}.db")) as cp:
            await cp.setup()
            yield cp
        return
    assert url is not None
    schema = f"bench_lg_{uuid.uuid4().hex[:10]}"
    admin = await asyncpg.connect(url)
    await admin.execute(f'CREATE SCHEMA "{schema}"')
    try:
        async with AsyncConnectionPool(url, min_size=4, max_size=20, open=False, kwargs={
                "autocommit": True, "prepare_threshold": 0, "row_factory": dict_row,
                "options": f"-c search_path={schema}"}) as pool:
            cp = AsyncPostgresSaver(pool)  # type: ignore[arg-type]
            await cp.setup()
            yield cp
    finally:
        await admin.execute(f'DROP SCHEMA "{schema}" CASCADE')
        await admin.close()


def _config(thread: str) -> dict[str, Any]:
    return {"configurable": {"thread_id": thread}}


async def chain_ms(checkpointer: Any, length: int, *, durability: str) -> float:
    """One chain run, start to end, in ms."""
    graph = chain_graph(checkpointer)
    started = time.perf_counter()
    await graph.ainvoke({"done": 0, "length": length}, {**_config(uuid.uuid4().hex), "recursion_limit": length + 5},
                        durability=durability)
    return (time.perf_counter() - started) * 1000


async def to_interrupt(graph: Any, thread: str) -> float:
    """Start one incident run and drive it to its approval interrupt; returns when it got there."""
    result = await graph.ainvoke({"incident_id": thread}, _config(thread), durability="sync")
    assert "__interrupt__" in result, result
    return time.perf_counter()


async def resume(graph: Any, thread: str) -> None:
    result = await graph.ainvoke(Command(resume="approve"), _config(thread), durability="sync")
    assert result.get("notified") and result.get("ticket"), result


class LangGraphEngine:
    """The incident graph on one checkpointer, and the threads waiting at their interrupt."""

    def __init__(self, checkpointer: Any) -> None:
        self.checkpointer, self.graph = checkpointer, incident_graph(checkpointer)
        self.waiting: list[str] = []

    async def chain_ms(self, length: int, durability: str = "sync") -> float:
        return await chain_ms(self.checkpointer, length, durability=durability)

    async def one_run_ms(self) -> float:
        """One run, start -> interrupt, in ms."""
        thread, started = uuid.uuid4().hex, time.perf_counter()
        reached = await to_interrupt(self.graph, thread)
        self.waiting.append(thread)
        return (reached - started) * 1000

    async def burst(self, count: int) -> tuple[list[float], float]:
        """``count`` runs started at once: (start -> interrupt ms each, wall seconds)."""
        threads = [uuid.uuid4().hex for _ in range(count)]
        started = time.perf_counter()
        reached = await asyncio.gather(*(to_interrupt(self.graph, t) for t in threads))
        self.waiting += threads
        return [(t - started) * 1000 for t in reached], time.perf_counter() - started

    async def approve_all(self) -> tuple[int, float]:
        """Resume every waiting run at once with "approve": (runs, wall seconds until all ended)."""
        threads, self.waiting = self.waiting, []
        started = time.perf_counter()
        await asyncio.gather(*(resume(self.graph, t) for t in threads))
        return len(threads), time.perf_counter() - started


@asynccontextmanager
async def langgraph_engine(backend: str, url: str | None, workdir: Path) -> AsyncIterator[LangGraphEngine]:
    async with saver(backend, url, workdir) as checkpointer:
        engine = LangGraphEngine(checkpointer)
        await engine.one_run_ms()  # warm-up
        await engine.chain_ms(2)
        yield engine


async def serve(backend: str, url: str | None, workdir: Path) -> None:
    """Answer bench/engine.py's requests on stdin/stdout (one JSON line each), in this process:
    LangGraph gets an event loop of its own, not one shared with ira's relay and consumers."""
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    async with langgraph_engine(backend, url, workdir) as engine:
        print(json.dumps({"ready": True}), flush=True)
        while line := await reader.readline():
            ask = json.loads(line)
            method, arg = ask["call"], ask.get("arg")
            result = await getattr(engine, method)(*(() if arg is None else (arg,)))
            print(json.dumps({"result": result}), flush=True)


class RemoteLangGraph:
    """The Engine of bench/engine.py, served by :func:`serve` in a child process."""

    def __init__(self, child: asyncio.subprocess.Process) -> None:
        self._child = child

    @classmethod
    @asynccontextmanager
    async def start(cls, argv: list[str]) -> AsyncIterator[RemoteLangGraph]:
        child = await asyncio.create_subprocess_exec(*argv, stdin=asyncio.subprocess.PIPE,
                                                     stdout=asyncio.subprocess.PIPE)
        remote = cls(child)
        try:
            assert json.loads(await remote._line())["ready"]
            yield remote
        finally:
            assert child.stdin is not None
            child.stdin.close()
            await asyncio.wait_for(child.wait(), timeout=60)

    async def _line(self) -> bytes:
        assert self._child.stdout is not None
        line = await self._child.stdout.readline()
        if not line:
            raise RuntimeError("the LangGraph process ended")
        return line

    async def _call(self, method: str, arg: int | None = None) -> Any:
        assert self._child.stdin is not None
        self._child.stdin.write(json.dumps({"call": method, "arg": arg}).encode() + b"\n")
        await self._child.stdin.drain()
        return json.loads(await self._line())["result"]

    async def chain_ms(self, length: int) -> float:
        return float(await self._call("chain_ms", length))

    async def one_run_ms(self) -> float:
        return float(await self._call("one_run_ms"))

    async def burst(self, count: int) -> tuple[list[float], float]:
        latencies, seconds = await self._call("burst", count)
        return latencies, seconds

    async def approve_all(self) -> tuple[int, float]:
        runs, seconds = await self._call("approve_all")
        return runs, seconds
