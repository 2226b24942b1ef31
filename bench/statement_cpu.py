"""Benchmark: the store's Python per SQLite statement and per write transaction (JSON lines).

Usage: python bench/statement_cpu.py [--iterations N] [--mode statements|transactions] [--callgrind]

``statements``: one write transaction (``Database.transaction``), per iteration an INSERT with a
``UtcDateTime`` and a JSON column, a two-key SELECT read with ``.first()`` twice, a SELECT of
several rows read with ``.all()`` and a five-parameter compare-and-set UPDATE read by its
``rowcount``: 5 statements, each planned (``store/sqlite_fast.py``), built once as the store's are.
``transactions``: per iteration one write transaction with one planned SELECT in it.
Prints CPU µs per statement (or transaction) of this process; on a shared machine compare two
trees by instructions instead, under callgrind with the instrumentation off until the measured
part (``--callgrind`` switches it on and off there):

    valgrind --tool=callgrind --instr-atstart=no --callgrind-out-file=/tmp/stmt.%p.out \\
        .venv/bin/python bench/statement_cpu.py --iterations 3000 --callgrind

The out file's "totals:" over 5 x iterations is the instructions per statement, SQLite's own
included; the difference of two ``--iterations`` (1000 and 3000) leaves the constant part out.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

from sqlalchemy import JSON, Column, Integer, MetaData, String, Table, bindparam, insert, select, update

from ira.runtime.store.database import Database
from ira.runtime.store.schema import UtcDateTime

_META = MetaData()
_ROWS = Table(
    "bench_rows", _META,
    Column("tenant_id", String(64), primary_key=True),
    Column("row_id", String(64), primary_key=True),
    Column("state", String(16), nullable=False),
    Column("version", Integer, nullable=False),
    Column("updated_at", UtcDateTime(), nullable=False),
    Column("data", JSON, nullable=False),
)
_INSERT = insert(_ROWS)
_GET = select(_ROWS.c.state, _ROWS.c.version, _ROWS.c.updated_at, _ROWS.c.data).where(
    _ROWS.c.tenant_id == bindparam("tenant_id"), _ROWS.c.row_id == bindparam("row_id"))
_LIST = select(_ROWS.c.row_id, _ROWS.c.version).where(
    _ROWS.c.tenant_id == bindparam("tenant_id"), _ROWS.c.state == bindparam("state")).limit(3)
_CAS = update(_ROWS).where(
    _ROWS.c.tenant_id == bindparam("t"), _ROWS.c.row_id == bindparam("r"),
    _ROWS.c.version == bindparam("expected")).values(
    version=bindparam("next"), updated_at=bindparam("at"))
STATEMENTS_PER_ITERATION = 5


def _callgrind(switch: str) -> None:
    """Switch callgrind's instrumentation of this process (started with ``--instr-atstart=no``)."""
    subprocess.run(["callgrind_control", switch, str(os.getpid())], check=True, capture_output=True)


async def _statements(db: Database, iterations: int, offset: int) -> None:
    at = datetime.now(UTC)
    async with db.transaction() as conn:
        for i in range(offset, offset + iterations):
            row_id = f"r{i}"
            await conn.execute(_INSERT, {"tenant_id": "t", "row_id": row_id, "state": "ready", "version": 1,
                                         "updated_at": at, "data": {"i": i}})
            row = (await conn.execute(_GET, {"tenant_id": "t", "row_id": row_id})).first()
            assert row is not None and row.version == 1
            (await conn.execute(_GET, {"tenant_id": "t", "row_id": row_id})).first()
            (await conn.execute(_LIST, {"tenant_id": "t", "state": "ready"})).all()
            changed = (await conn.execute(_CAS, {"t": "t", "r": row_id, "expected": 1, "next": 2, "at": at})).rowcount
            assert changed == 1


async def _transactions(db: Database, iterations: int) -> None:
    for _ in range(iterations):
        async with db.transaction() as conn:
            (await conn.execute(_GET, {"tenant_id": "t", "row_id": "r0"})).first()


async def main(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory(prefix="ira-bench-") as tmp:
        db = Database.create(f"sqlite:///{Path(tmp) / 'bench.db'}")
        try:
            async with db.transaction() as conn:
                await conn.run_sync(_META.create_all)
            await _statements(db, 20, 0)  # plans made (a statement is planned on its second execution)
            await _transactions(db, 20)
            if args.callgrind:
                _callgrind("--instr=on")
            cpu = time.process_time()
            if args.mode == "statements":
                await _statements(db, args.iterations, 20)
                count = args.iterations * STATEMENTS_PER_ITERATION
            else:
                await _transactions(db, args.iterations)
                count = args.iterations
            cpu = time.process_time() - cpu
            if args.callgrind:
                _callgrind("--instr=off")
        finally:
            await db.close()
    print(json.dumps({"bench": "statement_cpu", "mode": args.mode, "count": count,
                      "cpu_us_each": round(cpu * 1e6 / count, 2)}), flush=True)


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--iterations", type=int, default=3000)
    parser.add_argument("--mode", choices=("statements", "transactions"), default="statements")
    parser.add_argument("--callgrind", action="store_true", help="switch callgrind's instrumentation on around the "
                        "measured part (run under valgrind --tool=callgrind --instr-atstart=no)")
    return parser.parse_args(argv)


if __name__ == "__main__":
    asyncio.run(main(parse()))
