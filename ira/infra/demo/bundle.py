"""The scenario bundle as the demo and replay use it.

``load_bundle(dir)`` reads the source events (what to POST, where, and when relative to the
start), the expectations and the bundle's facts; ``bundle_connectors(dir)`` are the recorded
connectors to bind the agents to (``agents.recorded_bundle: <dir>`` in the configuration does
the same); ``unmet_expectations`` says what a replay's branch results failed to reproduce.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ira.connectors.bound import ConnectorSet
from ira.connectors.recorded import BundleInfo, read_bundle, recorded_connectors
from ira.core.investigation import BranchResult
from ira.core.model import Model
from ira.infra.demo import DEMO_BUNDLE


class SourceEvent(Model):
    offset_seconds: float
    """When it arrived, relative to the start of the recording."""
    kind: str
    """``alertmanager`` or ``change``."""
    source_id: str
    path: str
    """Where to POST it on ira, e.g. ``/v1/sources/alertmanager/am``."""
    payload: dict[str, Any]


@dataclass(frozen=True)
class Bundle:
    directory: Path
    info: BundleInfo
    events: tuple[SourceEvent, ...]
    expectations: dict[str, Any]


def load_bundle(directory: Path = DEMO_BUNDLE) -> Bundle:
    info, _ = read_bundle(directory)
    events = tuple(SourceEvent.model_validate(e) for e in json.loads((directory / "events.json").read_text()))
    expectations = json.loads((directory / "expectations.json").read_text())
    return Bundle(directory=directory, info=info, events=events, expectations=expectations)


def bundle_connectors(directory: Path = DEMO_BUNDLE) -> ConnectorSet:
    """Recorded connectors, anchored to each branch's window when used."""
    return recorded_connectors(directory)


def unmet_expectations(bundle: Bundle, results: Mapping[str, BranchResult]) -> list[str]:
    """Every expectation of the bundle a set of branch results misses (empty: all met)."""
    missing = []
    for branch, wanted in bundle.expectations.get("branches", {}).items():
        result = results.get(branch)
        if result is None:
            missing.append(f"{branch}: no result")
            continue
        if result.stop_reason.value != wanted.get("stop_reason", result.stop_reason.value):
            missing.append(f"{branch}: stopped {result.stop_reason.value}, expected {wanted['stop_reason']}")
        evidence = " | ".join(e.summary for e in result.evidence)
        hypotheses = " | ".join(h.statement for h in result.hypotheses)
        missing += [f"{branch}: no evidence mentions {p!r}" for p in wanted.get("evidence_contains", [])
                    if p not in evidence]
        missing += [f"{branch}: no hypothesis mentions {p!r}" for p in wanted.get("hypotheses_contain", [])
                    if p not in hypotheses]
        first = wanted.get("first_runbook")
        if first and (not result.evidence or result.evidence[0].data.get("runbook_id") != first):
            missing.append(f"{branch}: first runbook is not {first}")
    return missing
