"""Benchmark: what an idle ``ira dev`` costs, process by process (JSON lines).

Usage: .venv/bin/python bench/idle.py [--settle 15] [--window 20] [--rounds 1] [--handles [K]]
       [--ops N] (a smoke run: short settle and window)

Starts the whole ``ira dev`` (every role, its child processes, the embedded broker and Redis,
SQLite; bench/ingest.py's ``ira_dev``), posts nothing, waits ``--settle`` seconds (startup work
done, and past ``consumer.idle_after``, so paced consumers are idle), then reads every process's
user + system CPU time from ``/proc`` over ``--window`` seconds. One line per process (its share
of one core, %), then the tree's total. Idle CPU is what a deployment burns with nothing to do,
and what every alert and run shares at modest rates. Compare two trees with
``PYTHONPATH=<tree>``, alternately: a window's figure moves by ~10 % between runs.

``--handles K``: ``ira dev`` runs under ``bench/handle_timer.py``, which charges each event-loop
callback its thread's CPU time; the K callbacks of the ``ira`` process's loop that cost most over
the window follow (``task RelayRole.run``: the relay's steps, ...). The timing costs CPU of its
own: read shares, not the absolute figure.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import tempfile
import time
from pathlib import Path

from ingest import cpu_seconds, emit, ira_dev, process_name, progress


def command_of(pid: int) -> str:
    """A process's role in the tree: its command line without the interpreter."""
    try:
        words = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except FileNotFoundError:
        return str(pid)
    words = [w.decode(errors="replace") for w in words if w]
    if words and os.path.basename(words[0]).startswith("python"):
        words = words[1:]
    return " ".join(words[:4])[:80]


def measure(args: argparse.Namespace, round_: int) -> None:
    with tempfile.TemporaryDirectory(prefix="ira-idle-") as tmp, \
            ira_dev(Path(tmp), timed_handles=args.handles is not None) as target:
        progress(f"round {round_}: ira dev ready; settling {args.settle:g} s")
        time.sleep(args.settle)
        if args.handles is not None:
            os.kill(target.pid, signal.SIGUSR1)
        before = {pid: cpu_seconds(pid) for pid in target.pids}
        started = time.monotonic()
        time.sleep(args.window)
        after = {pid: cpu_seconds(pid) for pid in target.pids}
        window = time.monotonic() - started
        total = 0.0
        for pid in target.pids:
            share = 100 * (after[pid] - before[pid]) / window
            total += share
            emit({"bench": "idle", "round": round_, "process": process_name(pid) if pid != target.pid else "ira dev",
                  "command": command_of(pid), "cpu_percent_of_a_core": round(share, 2)})
        emit({"bench": "idle", "round": round_, "process": "tree", "window_s": round(window, 1),
              "cpu_percent_of_a_core": round(total, 2)})
        if args.handles is not None:
            report_handles(Path(target.home) / "handle-times.json", target.pid, window, round_, args.handles)


def report_handles(path: Path, pid: int, window: float, round_: int, top: int) -> None:
    os.kill(pid, signal.SIGUSR2)
    deadline = time.monotonic() + 10
    while not path.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    if not path.exists():
        progress(f"no {path} within 10 s: handle times not reported")
        return
    times = json.loads(path.read_text())
    loop = sum(ns for ns, _runs in times.values())
    emit({"bench": "idle", "round": round_, "handles": "ira dev's loop", "cpu_percent_of_a_core":
          round(100 * loop / 1e9 / window, 2)})
    for name, (ns, runs) in sorted(times.items(), key=lambda item: -item[1][0])[:top]:
        emit({"bench": "idle", "round": round_, "handle": name, "runs_per_s": round(runs / window, 1),
              "us_each": round(ns / max(1, runs) / 1000, 1),
              "cpu_percent_of_a_core": round(100 * ns / 1e9 / window, 3)})


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--settle", type=float, default=15, help="seconds after ready before measuring")
    parser.add_argument("--window", type=float, default=20, help="seconds measured")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--handles", type=int, nargs="?", const=20, metavar="K",
                        help="also the K costliest callbacks of the ira process's event loop")
    parser.add_argument("--ops", type=int, help="smoke run (make bench): settle 2 s, window 3 s")
    args = parser.parse_args(argv)
    if args.ops is not None:
        args.settle, args.window, args.rounds = 2.0, 3.0, 1
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse(argv)
    for round_ in range(args.rounds):
        measure(args, round_)


if __name__ == "__main__":
    main()
