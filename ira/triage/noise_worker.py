"""``python -m ira.triage.noise_worker``: the faust noise worker, a child of the triage role.

faust runs its own worker (event loop, signal handling, consumer thread), so it lives in a
process of its own rather than inside ``ira dev``'s loop. The parent
(:class:`ira.triage.noise_process.NoiseWorkerProcess`) writes a
:class:`~ira.triage.noise_app.NoiseWorkerConfig` as JSON on stdin, restarts the child if it
dies, and stops it with SIGTERM (SIGKILL after a grace period) when triage stops; the child
also dies with its parent (``PR_SET_PDEATHSIG``), so it is never left behind. The windows are
rebuilt from the events topic for the partitions each assignment gives the worker, before it
counts them (:class:`ira.triage.noise_rebuild.Ownership`).
"""

from __future__ import annotations

import sys


def main() -> None:
    from faust.worker import Worker

    from ira.triage.noise_app import build_app, config_from_stdin

    config = config_from_stdin(sys.stdin.read())
    app = build_app(config)
    Worker(app, loglevel=config.log_level, quiet=True).execute_from_commandline()


if __name__ == "__main__":
    main()
