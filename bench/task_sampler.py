"""``python -m bench.task_sampler dev``: the ``ira`` command with a stack sampler, for profiling.

py-spy is not installed here, and cProfile misattributes time under SQLAlchemy's greenlets (its
cumulative figures put idle pollers at a third of a drain). This samples every thread's stack
from a thread of its own, and charges each sample of the event loop's thread to the asyncio
task running at that moment (its name and coroutine: ``triage:ConsumerRunner.run``,
``relay:RelayRole.run``, ``Task:RequestResponseCycle.run_asgi`` ...), greenlets or not.

SIGUSR1 starts sampling (every ``SAMPLE_EVERY`` seconds), SIGUSR2 stops it and writes
``$BENCH_TASK_SAMPLES`` (JSON: samples per task of the loop's thread, idle included, and each
task's most frequent innermost frames). ``bench/ingest.py --pipeline --sample-tasks FILE``
drives it around each run.

Read the task shares, not the frames: the sampler thread needs the GIL to take a sample, and
gets it when the loop's thread next lets go of it, usually at the next call that releases it (a
SQLite statement or commit, a socket write, ``os.urandom``): that call is where the sample lands,
though the time went into what ran before it. The task is the one running then, so task shares
hold up; a frame's share is not its CPU time (``ids.new_id``, 2.6 µs, drew ~20 % of triage's
samples). Time spent inside such a call (a long commit) is sampled as it should be.
"""

from __future__ import annotations

import asyncio.tasks
import collections
import json
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from types import FrameType
from typing import Any

SAMPLE_EVERY = 0.002
_samples: collections.Counter[tuple[str, str]] = collections.Counter()
_running = threading.Event()


def _task_of_loop() -> str:
    """The task running on the loop's thread now (``<loop>`` between tasks)."""
    current: dict[Any, asyncio.Task[Any]] = asyncio.tasks._current_tasks  # type: ignore[attr-defined]
    task = next(iter(current.values()), None)  # one loop in an ira process
    if task is None:
        return "<loop>"
    coro = task.get_coro()
    return f"{task.get_name().split('-')[0]}:{getattr(coro, '__qualname__', '?')}"


def _leaf(frame: FrameType | None, depth: int = 3) -> str:
    names: list[str] = []
    while frame is not None and len(names) < depth:
        names.append(f"{os.path.basename(frame.f_code.co_filename)}:{frame.f_code.co_name}")
        frame = frame.f_back
    return " < ".join(names)


def _sample() -> None:
    main = threading.main_thread().ident
    while _running.is_set():
        frame = sys._current_frames().get(main or 0)
        leaf = _leaf(frame)
        idle = leaf.startswith(("selectors.py:select", "base_events.py:_run_once"))
        _samples[("<idle>" if idle else _task_of_loop(), leaf)] += 1
        time.sleep(SAMPLE_EVERY)


def _start(*_: Any) -> None:
    _samples.clear()
    _running.set()
    threading.Thread(target=_sample, name="task-sampler", daemon=True).start()


def _stop(*_: Any) -> None:
    _running.clear()
    tasks: collections.Counter[str] = collections.Counter()
    frames: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    for (task, leaf), count in _samples.items():
        tasks[task] += count
        frames[task][leaf] += count
    report = {"samples": sum(tasks.values()), "every_s": SAMPLE_EVERY,
              "tasks": [{"task": task, "samples": count, "top": frames[task].most_common(8)}
                        for task, count in tasks.most_common()]}
    path = os.environ.get("BENCH_TASK_SAMPLES", "task-samples.json")
    with open(f"{path}.part", "w") as out:  # renamed when whole: the bench waits for the name
        json.dump(report, out, indent=1)
    os.replace(f"{path}.part", path)


def run_ira(on_usr1: Callable[..., Any], on_usr2: Callable[..., Any]) -> None:
    """The ``ira`` command this command line names (``python -m bench.<tool> dev``), with the
    tool's handlers on SIGUSR1 (start) and SIGUSR2 (report); bench/handle_timer.py's too."""
    signal.signal(signal.SIGUSR1, on_usr1)
    signal.signal(signal.SIGUSR2, on_usr2)
    from ira.runtime.cli import main as ira

    sys.argv = ["ira", *sys.argv[1:]]
    ira()


def main() -> None:
    run_ira(_start, _stop)


if __name__ == "__main__":
    main()
