"""``python -m ira.triage.noise_worker``: the faust noise worker, a child of the triage role.

faust runs its own worker (event loop, signal handling, consumer thread), so it lives in a
process of its own rather than inside ``ira dev``'s loop. The parent
(:class:`ira.triage.noise_process.NoiseWorkerProcess`) writes a
:class:`~ira.triage.noise_app.NoiseWorkerConfig` as JSON on stdin, restarts the child if it
dies, and stops it with SIGTERM (SIGKILL after a grace period) when triage stops; the child
also dies with its parent (``PR_SET_PDEATHSIG``), so it is never left behind. Before faust
starts, the windows are rebuilt from the events topic (:func:`ira.triage.noise_app.rebuild`),
in a loop of their own.
"""

from __future__ import annotations

import asyncio
import sys


def main() -> None:
    from faust.worker import Worker

    from ira.runtime.settings.triage import TriageSettings
    from ira.triage.noise_app import build_app, config_from_stdin, new_windows, rebuild

    config = config_from_stdin(sys.stdin.read())
    windows = new_windows(TriageSettings.model_validate(config.triage))
    loop = asyncio.new_event_loop()  # not the current loop: faust makes its own
    try:
        counted = loop.run_until_complete(rebuild(config, windows))
    finally:
        loop.close()
    print(f"noise state rebuilt from {counted} records", flush=True)
    app = build_app(config, windows)
    Worker(app, loglevel=config.log_level, quiet=True).execute_from_commandline()


if __name__ == "__main__":
    main()
