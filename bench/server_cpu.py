"""The CPU a local PostgreSQL server spent, read from /proc (bench/approve_cpu.py, start_cpu.py).

A benchmark that times only its own process misses what it makes the server do: a connection
opened per transaction (a backend forked, its catalog caches filled, every statement prepared
again) costs the server, not the client. The sum of every ``postgres`` process's user and
system time, with what its exited children spent (a backend that ended during the measure is
charged to the postmaster's ``cutime``/``cstime`` once reaped), read before and after.
Linux only, and only for a server on this machine; elsewhere ``read`` returns None.

    before = server_cpu.before(backend)   # None but on PostgreSQL
    ...                                   # the measured work
    figures.update(server_cpu.per_run(before, runs))
"""

from __future__ import annotations

import os
from pathlib import Path

_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def read() -> float | None:
    """Seconds of CPU of every ``postgres`` process on this machine so far, or None (no /proc,
    or no such process)."""
    total, seen = 0, False
    proc = Path("/proc")
    if not proc.is_dir():
        return None
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:  # ended meanwhile
            continue
        name_end = stat.rfind(")")
        if stat[stat.find("(") + 1:name_end] != "postgres":
            continue
        fields = stat[name_end + 2:].split()
        total += sum(int(v) for v in fields[11:15])  # utime, stime, cutime, cstime
        seen = True
    return total / _TICK if seen else None



def before(backend: str) -> float | None:
    """``read`` where ``backend`` is PostgreSQL; None on SQLite, whose database works inside the
    measured process (a PostgreSQL server on this machine would be someone else's)."""
    return read() if backend == "postgresql" else None


def spent(before: float | None) -> float | None:
    """CPU seconds since ``before`` (a ``read``), or None where it was not measured."""
    after = read() if before is not None else None
    return None if before is None or after is None else after - before


def figure(seconds: float | None, runs: int) -> dict[str, float]:
    """``{"db_server_cpu_ms_per_run": ..}`` for ``seconds`` over ``runs``; nothing where not measured."""
    return {} if seconds is None or not runs else {"db_server_cpu_ms_per_run": round(seconds * 1000 / runs, 2)}


def per_run(before: float | None, runs: int) -> dict[str, float]:
    """``figure`` of the CPU spent since ``before``."""
    return figure(spent(before), runs)
