"""The webhook edge and the outbox relay in ONE process, as ``ira dev`` runs them (for bench/ingest.py).

``ingest.ack: store`` makes the relay part of every alert's path, and on SQLite the gateway's
commits and the relay's must share the in-process write lock (two processes on one SQLite file
would wait on each other's file lock instead). Configured like ``ira worker``: IRA_* variables.
Usage: python -m bench.gateway_relay
"""

from __future__ import annotations

import asyncio
import os

from ira.runtime.process import GATEWAY
from ira.runtime.role import load_roles
from ira.runtime.settings import load_settings
from ira.runtime.stack import open_platform
from ira.runtime.supervisor import Supervision, build_http, install_stop_signals, supervise
from ira.runtime.telemetry import setup_tracing, shutdown_tracing


async def main() -> int:
    settings = load_settings(os.environ)
    roles = load_roles()
    tracer = setup_tracing(settings, service_name=f"ira-{GATEWAY}")
    supervision = Supervision()
    install_stop_signals(supervision)
    try:
        async with open_platform(settings, embedded=False, say=print) as platform:
            server = build_http(platform, [roles["sources"]], supervision, tracer)
            return await supervise(platform, [roles["relay"]], server=server, supervision=supervision)
    finally:
        shutdown_tracing(tracer)


if __name__ == "__main__":
    raise SystemExit(asyncio.run(main()))
