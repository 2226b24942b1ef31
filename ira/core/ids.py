"""Identifier generation: prefixed, sortable by creation time, unique without coordination."""

from __future__ import annotations

import os
import time
import uuid


def new_id(prefix: str) -> str:
    """A new id like ``run_0193a1b2c3d4e5...``: millisecond time + 80 random bits.

    Time-ordered ids keep B-tree inserts local and make logs readable in order.
    """
    millis = int(time.time() * 1000)
    return f"{prefix}_{millis:012x}{os.urandom(10).hex()}"


def new_event_id() -> str:
    """A random UUID for events and messages (what receivers dedupe on)."""
    return str(uuid.uuid4())
