"""Fault points: named places where a test can make this process die on purpose.

Fault tests must kill the real process at a chosen point (not raise an exception that a
handler could catch). A point is armed only by configuration (``IRA_FAULTS``); unarmed,
``hit`` costs a set lookup.
"""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Iterable


class FaultPoints:
    """The armed fault points of this process."""

    def __init__(self, armed: Iterable[str] = ()) -> None:
        self._armed = frozenset(armed)

    def hit(self, name: str) -> None:
        """Die at once (SIGKILL: no cleanup, no flush) if ``name`` is armed."""
        if name in self._armed:
            print(f"fault point {name} hit: killing pid {os.getpid()}", file=sys.stderr, flush=True)
            os.kill(os.getpid(), signal.SIGKILL)
