"""Looking at real processes from tests: children, and processes holding a path."""

from __future__ import annotations

import os
import socket
from pathlib import Path

IRA = str(Path(__file__).resolve().parents[1] / ".venv" / "bin" / "ira")


def ira_command() -> str:
    """The installed ``ira`` script (the venv's), falling back to the one on PATH."""
    return IRA if os.path.exists(IRA) else "ira"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _cmdline(pid: str) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def _ppid(pid: str) -> int | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(stat.rsplit(")", 1)[1].split()[1])


def _alive(pid: str) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def descendants_and_holders(root_pid: int, marker: str) -> set[int]:
    """Live processes that are children of ``root_pid`` or mention ``marker`` (a data dir)
    on their command line or open files: what must be gone after a clean shutdown."""
    found = set()
    for pid in filter(str.isdigit, os.listdir("/proc")):
        if int(pid) == root_pid or not _alive(pid):
            continue
        if _ppid(pid) == root_pid or marker in _cmdline(pid) or _holds(pid, marker):
            found.add(int(pid))
    return found


def _holds(pid: str, marker: str) -> bool:
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return False
    for fd in fds:
        try:
            if marker in os.readlink(f"/proc/{pid}/fd/{fd}"):
                return True
        except OSError:
            continue
    return False


def alive(pids: set[int]) -> set[int]:
    return {p for p in pids if _alive(str(p))}
