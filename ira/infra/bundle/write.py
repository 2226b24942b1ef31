"""Lay a bundle document out as a directory, the form ``ira bundle check`` and ``ira replay`` read.

Written under a temporary name and renamed into place, so a crash never leaves a half bundle
that looks whole; an existing directory is refused rather than merged into.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from ira.infra.bundle.format import BundleDocument


class BundleExistsError(Exception):
    """The target directory exists and is not empty."""


def write_bundle(document: BundleDocument, directory: Path) -> Path:
    if directory.exists() and any(directory.iterdir()):
        raise BundleExistsError(f"{directory} exists and is not empty")
    partial = directory.with_name(directory.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    _json(partial / "bundle.json", document.manifest.model_dump(mode="json", exclude_none=True))
    _json(partial / "events.json", [e.model_dump(mode="json") for e in document.events])
    _lines(partial / "observations.jsonl", [o.model_dump(mode="json", exclude_none=True)
                                            for o in document.observations])
    if document.model_calls:
        _lines(partial / "model_calls.jsonl", [c.model_dump(mode="json", exclude_none=True)
                                               for c in document.model_calls])
    if document.outcome is not None:
        _json(partial / "outcome.json", document.outcome.model_dump(mode="json"))
    if document.expectations is not None:
        _json(partial / "expectations.json", document.expectations.model_dump(mode="json", exclude_none=True))
    if document.runbooks:
        (partial / "runbooks").mkdir()
        for name, text in sorted(document.runbooks.items()):
            (partial / "runbooks" / Path(name).name).write_text(text, encoding="utf-8")
    if directory.exists():
        directory.rmdir()
    partial.rename(directory)
    return directory


def _json(path: Path, value: Any) -> None:
    path.write_text(json.dumps(value, indent=2, sort_keys=True) + "\n", encoding="utf-8")


def _lines(path: Path, values: list[Any]) -> None:
    path.write_text("".join(json.dumps(v, sort_keys=True) + "\n" for v in values), encoding="utf-8")
