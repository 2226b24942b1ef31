"""What ``ira dev`` tells and checks before a newcomer sees anything else.

* :func:`port_in_use` runs BEFORE the broker and Redis start: a taken HTTP port is answered in
  milliseconds with a hint, not after seconds of starting services (or a hang on ``[Errno 98]``).
* :func:`clear_data_dir` is ``--fresh``: the embedded state (SQLite, Redis, logs) goes, so the
  demo runs again from the start.
* :func:`ready_block` is the short human block printed once everything is up.
"""

from __future__ import annotations

import errno
import shutil
import socket
from pathlib import Path

from ira.core.errors import ConfigError
from ira.runtime.settings import Settings

_KEEP_OUT = ("/", str(Path.home()))


def port_in_use(host: str, port: int) -> bool:
    """True when nothing of ours could listen on ``host:port`` (someone else already does)."""
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn binds: TIME_WAIT is no conflict
        try:
            probe.bind((host, port))
        except OSError as exc:
            if exc.errno in (errno.EADDRINUSE, errno.EACCES):
                return True
            raise
    return False


def port_hint(host: str, port: int) -> str:
    return (f"ira: {host}:{port} is already in use (another `ira dev`?). Stop it, or pick another port: "
            f"IRA_HTTP_PORT={port + 1} ira dev")


def clear_data_dir(settings: Settings) -> Path | None:
    """Remove the data directory (``--fresh``); refuses the filesystem root, home and cwd."""
    data_dir = settings.data_dir.resolve()
    if str(data_dir) in _KEEP_OUT or data_dir == Path.cwd().resolve():
        raise ConfigError("data_dir", f"--fresh refuses to delete {data_dir}; set IRA_DATA_DIR to ira's own directory")
    if not data_dir.exists():
        return None
    shutil.rmtree(data_dir)
    return data_dir


def _sources_line(settings: Settings) -> str:
    """Which investigator branches a run gets: only those whose data source is configured."""
    found = settings.agents.configured_sources()
    if not found:
        return ("  sources     none configured: runs draft the ticket from the alert alone "
                "(set agents.prometheus, agents.loki or agents.jsonl_logs, agents.runbooks_dir)")
    missing = sorted({"metrics", "logs", "runbooks"} - found)
    unset = f"   (not configured: {', '.join(missing)})" if missing else ""
    return f"  sources     {', '.join(sorted(found))}{unset}"


def ready_block(settings: Settings, *, url: str, demo: bool) -> str:
    """Where to go, how to log in, what the demo does, how to stop and start over."""
    token = next((t.token.get_secret_value() for t in settings.api_tokens if "admin" in t.roles), None)
    lines = ["", f"  ira is running at {url}", "",
             f"  dashboard   {url}/" + (f"   log in with the token {token}" if token else ""),
             f"  API docs    {url}/docs", _sources_line(settings)]
    if demo:
        lines += ["  the demo    replays incident ALR-20260429-017: order-service slows down after a deploy.",
                  "              In about a minute a ticket draft waits for you under \"Needs a human\";",
                  "              read it, approve it, and the run files INC-1."]
    lines += ["  stop        Ctrl-C",
              f"  start over  ira dev --fresh   (deletes {settings.data_dir}/: the database, Redis and logs)", ""]
    return "\n".join(lines)
