"""What ``POST /v1/replays`` takes and what ``GET /v1/replays`` answers."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import Field

from ira.core.model import Model
from ira.core.replay import Comparison, Outcome
from ira.infra.bundle.format import BundleDocument

MAX_REPLAY_BODY = 8 * 1024 * 1024
"""A bundle with its observations: recorded metric series and log lines run to megabytes."""


Observations = Literal["recorded", "live"]


class ReplayRequest(BundleDocument):
    """A bundle as one document (``ira replay --bundle DIR`` reads the directory and sends this)."""

    observations_from: Observations = "recorded"
    """``recorded``: the staging branches answer from the bundle's tool results (and model calls);
    ``live``: from the connectors (and models) this ira is configured with, read-only as always."""
    speed: float = Field(default=0.0, ge=0.0)
    """Compress the recorded gaps this many times; 0 sends every event at once."""


class ReplayReport(Model):
    """How the replay compares with the original, and whether it passed."""

    outcome: Outcome
    comparison: Comparison
    unmet: tuple[str, ...]
    passed: bool
    verdict: str


class ReplayView(Model):
    replay_id: str
    bundle_id: str
    state: str
    """``sending``, ``running``, ``finished`` or ``failed``."""
    observations_from: Observations = "recorded"
    events_total: int
    events_sent: int
    run_id: str | None
    run_state: str | None = None
    branches_finished: int = 0
    branches_total: int = 0
    report: ReplayReport | None
    error: str | None
    created_at: datetime
    updated_at: datetime


class ReplayList(Model):
    replays: tuple[ReplayView, ...]
