"""Read a bundle directory into typed models, or say exactly what is wrong with it.

``check_bundle`` collects every problem (file + location + reason) instead of stopping at the
first, so ``ira bundle check`` can list them all; ``load_bundle`` raises ``BundleError`` with
that list. Nothing here assumes the demo's tenant, service or alert.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from ira.core.investigation import BranchResult
from ira.infra.bundle.format import (
    FORMAT_VERSIONS,
    BranchOutcome,
    BundleDocument,
    Expectations,
    Manifest,
    ModelCall,
    Observation,
    Outcome,
    SourceEvent,
)

M = TypeVar("M", bound=BaseModel)


@dataclass(frozen=True)
class Problem:
    path: str
    """The file, then where inside it: ``observations.jsonl line 3: request``."""
    reason: str

    def __str__(self) -> str:
        return f"{self.path}: {self.reason}"


class BundleError(Exception):
    def __init__(self, directory: Path, problems: list[Problem]) -> None:
        super().__init__(f"{directory} is not a valid bundle: " + "; ".join(map(str, problems)))
        self.problems = problems


@dataclass(frozen=True)
class Bundle:
    directory: Path
    manifest: Manifest
    events: tuple[SourceEvent, ...]
    observations: tuple[Observation, ...] = ()
    model_calls: tuple[ModelCall, ...] = ()
    runbooks: dict[str, str] = field(default_factory=dict)
    """File name -> content."""
    outcome: Outcome | None = None
    expectations: Expectations | None = None

    @property
    def document(self) -> BundleDocument:
        return BundleDocument(manifest=self.manifest, events=self.events, observations=self.observations,
                              model_calls=self.model_calls, runbooks=self.runbooks, outcome=self.outcome,
                              expectations=self.expectations)


@dataclass
class _Reader:
    directory: Path
    problems: list[Problem] = field(default_factory=list)

    def text(self, name: str, *, required: bool) -> str | None:
        path = self.directory / name
        if not path.is_file():
            if required:
                self.problems.append(Problem(name, "missing file"))
            return None
        try:
            return path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            self.problems.append(Problem(name, f"unreadable: {exc}"))
            return None

    def json(self, name: str, text: str, where: str = "") -> Any:
        try:
            return json.loads(text)
        except json.JSONDecodeError as exc:
            self.problems.append(Problem(f"{name}{where}", f"bad JSON: {exc.msg} at line {exc.lineno} "
                                                           f"column {exc.colno}"))
            return None

    def model(self, model: type[M], data: Any, path: str) -> M | None:
        try:
            return model.model_validate(data)
        except ValidationError as exc:
            for error in exc.errors():
                loc = ".".join(str(p) for p in error["loc"])
                self.problems.append(Problem(f"{path}: {loc}" if loc else path, error["msg"].lower()))
            return None

    def document(self, model: type[M], name: str, *, required: bool) -> M | None:
        text = self.text(name, required=required)
        data = None if text is None else self.json(name, text)
        return None if data is None else self.model(model, data, name)

    def lines(self, model: type[M], name: str) -> list[M]:
        text = self.text(name, required=False) or ""
        found = []
        for number, line in enumerate(text.splitlines(), start=1):
            if not line.strip():
                continue
            where = f" line {number}"
            data = self.json(name, line, where)
            item = None if data is None else self.model(model, data, name + where)
            if item is not None:
                found.append(item)
        return found


def check_bundle(directory: Path) -> list[Problem]:
    """Every problem of the bundle at ``directory`` (empty: it is valid)."""
    try:
        read(directory)
    except BundleError as exc:
        return exc.problems
    return []


def load_bundle(directory: Path) -> Bundle:
    """The bundle at ``directory``; raises ``BundleError`` listing every problem."""
    return read(directory)


def read(directory: Path) -> Bundle:
    reader = _Reader(directory)
    if not directory.is_dir():
        raise BundleError(directory, [Problem(str(directory), "not a directory")])
    manifest = _manifest(reader)
    version = manifest.format_version if manifest else 1
    events = _events(reader)
    observations = reader.lines(Observation, "observations.jsonl")
    model_calls = reader.lines(ModelCall, "model_calls.jsonl")
    _version_rules(reader, version, observations, model_calls)
    outcome = reader.document(Outcome, "outcome.json", required=False) or _legacy_outcome(reader)
    expectations = reader.document(Expectations, "expectations.json", required=False)
    runbooks = _runbooks(reader)
    if reader.problems or manifest is None:
        raise BundleError(directory, reader.problems)
    return Bundle(directory=directory, manifest=manifest, events=tuple(events), observations=tuple(observations),
                  model_calls=tuple(model_calls), runbooks=runbooks, outcome=outcome, expectations=expectations)


def _manifest(reader: _Reader) -> Manifest | None:
    manifest = reader.document(Manifest, "bundle.json", required=True)
    if manifest is not None and manifest.format_version not in FORMAT_VERSIONS:
        known = ", ".join(map(str, FORMAT_VERSIONS))
        reader.problems.append(Problem("bundle.json: format_version",
                                       f"unknown version {manifest.format_version} (known: {known})"))
    return manifest


def _events(reader: _Reader) -> list[SourceEvent]:
    text = reader.text("events.json", required=True)
    data = None if text is None else reader.json("events.json", text)
    if data is None:
        return []
    if not isinstance(data, list) or not data:
        reader.problems.append(Problem("events.json", "must be a non-empty list of source events"))
        return []
    events = [reader.model(SourceEvent, item, f"events.json: {i}") for i, item in enumerate(data)]
    return [e for e in events if e is not None]


def _version_rules(reader: _Reader, version: int, observations: list[Observation],
                   model_calls: list[ModelCall]) -> None:
    """What version 1 could not say: a bundle claiming version 1 must not say it."""
    if version >= 2:
        return
    for number, obs in enumerate(observations, start=1):
        if obs.error is not None:
            reader.problems.append(Problem(f"observations.jsonl entry {number}: error",
                                           "recorded errors need format_version 2"))
    if model_calls:
        reader.problems.append(Problem("model_calls.jsonl", "model calls need format_version 2"))


def _legacy_outcome(reader: _Reader) -> Outcome | None:
    """Version 1 kept the branch results (``results.json``); they are the outcome's branches."""
    text = reader.text("results.json", required=False)
    data = None if text is None else reader.json("results.json", text)
    if not isinstance(data, dict):
        return None
    branches = {}
    for name, raw in data.items():
        result = reader.model(BranchResult, raw, f"results.json: {name}")
        if result is not None:
            branches[name] = BranchOutcome(stop_reason=result.stop_reason.value, error=result.error,
                                           hypotheses=[h.statement for h in result.hypotheses],
                                           evidence=[e.summary for e in result.evidence])
    return Outcome(branches=branches)


def _runbooks(reader: _Reader) -> dict[str, str]:
    folder = reader.directory / "runbooks"
    if not folder.is_dir():
        return {}
    found = {}
    for path in sorted(folder.iterdir()):
        text = reader.text(f"runbooks/{path.name}", required=False) if path.is_file() else None
        if text is not None:
            found[path.name] = text
    return found
