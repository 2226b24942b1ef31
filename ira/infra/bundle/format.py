"""The files of a scenario bundle, as typed models (the JSON Schema is generated from them).

A bundle is a directory; each file has one model here. ``format_version`` lives in
``bundle.json``; a bundle written before versioning (no ``format_version``, like the demo's)
is version 1. Version 2 adds recorded tool errors, model calls by request fingerprint and the
original run's outcome; everything a version 1 bundle says still means the same.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field

from ira.connectors.recorded import BundleInfo as Manifest
from ira.connectors.recorded import RecordedError
from ira.connectors.recorded import Recording as Observation
from ira.connectors.recorded_models import RecordedModelCall as ModelCall
from ira.core.model import Model
from ira.core.replay import BranchExpectation, BranchOutcome, Expectations, Outcome

__all__ = ["BranchExpectation", "BranchOutcome", "BundleDocument", "Expectations", "Manifest", "ModelCall",
           "Observation", "Outcome", "RecordedError", "SourceEvent"]

FORMAT_VERSIONS = (1, 2)
CURRENT_VERSION = 2


class SourceEvent(Model):
    """One entry of ``events.json``: a webhook as its source sent it."""

    offset_seconds: float = Field(ge=0)
    """When it arrived, relative to the start of the recording."""
    kind: str
    """``alertmanager``, ``change``, ... (the source kind of ``path``)."""
    source_id: str
    path: str
    """Where it was POSTed on ira, e.g. ``/v1/sources/alertmanager/am``."""
    payload: dict[str, Any]


class BundleDocument(Model):
    """A whole bundle as one document: what ``ira record`` fetches and ``POST /v1/replays`` takes.

    ``write_bundle`` lays it out as a directory (one file per field), ``load_bundle`` reads it back.
    """

    manifest: Manifest
    events: tuple[SourceEvent, ...] = Field(min_length=1, max_length=1000)
    observations: tuple[Observation, ...] = ()
    model_calls: tuple[ModelCall, ...] = ()
    runbooks: dict[str, str] = Field(default_factory=dict)
    """Runbook file name -> content."""
    outcome: Outcome | None = None
    expectations: Expectations | None = None
