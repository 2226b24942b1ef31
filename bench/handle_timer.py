"""``python -m bench.handle_timer dev``: the ``ira`` command with every event-loop callback timed.

What an idle process's loop spends its CPU on is small and spread over many wake-ups, which
samplers misplace: py-spy and ``bench/task_sampler.py`` take a sample when the loop's thread
next lets go of the GIL (usually in ``select``), so an idle loop's own work is mostly not where
they put it. This charges each asyncio ``Handle``'s run (one step of a task, a callback) its
thread's CPU time (``time.thread_time_ns`` around ``Handle._run``), to the task's coroutine
(``task RelayRole.run``) or the callback's name.

SIGUSR1 starts counting afresh, SIGUSR2 writes ``$BENCH_HANDLE_TIMES`` (JSON: name -> [CPU ns,
runs]); ``bench/idle.py --handles`` drives it. Timing every callback costs ~1 µs each: read the
shares, not the absolute figure.
"""

from __future__ import annotations

import asyncio.events
import collections
import json
import os
import time
from typing import Any

from bench.task_sampler import run_ira

_times: collections.defaultdict[str, list[int]] = collections.defaultdict(lambda: [0, 0])
_counting = False
_run = asyncio.events.Handle._run


def _name(handle: asyncio.events.Handle) -> str:
    callback = handle._callback  # type: ignore[attr-defined]
    task = getattr(callback, "__self__", None)
    if isinstance(task, asyncio.Task):
        return f"task {getattr(task.get_coro(), '__qualname__', '?')}"
    return str(getattr(callback, "__qualname__", type(callback).__name__))


def _timed(handle: asyncio.events.Handle) -> None:
    if not _counting:
        _run(handle)
        return
    started = time.thread_time_ns()
    try:
        _run(handle)
    finally:
        spent = _times[_name(handle)]
        spent[0] += time.thread_time_ns() - started
        spent[1] += 1


def _start(*_: Any) -> None:
    global _counting
    _times.clear()
    _counting = True


def _write(*_: Any) -> None:
    path = os.environ.get("BENCH_HANDLE_TIMES", "handle-times.json")
    with open(f"{path}.part", "w") as out:  # renamed when whole: the bench waits for the name
        json.dump(dict(_times), out)
    os.replace(f"{path}.part", path)


def main() -> None:
    asyncio.events.Handle._run = _timed  # type: ignore[method-assign]
    run_ira(_start, _write)


if __name__ == "__main__":
    main()
