"""The JSON Schema of a bundle, generated from the models: one object whose properties are its files.

``python -m ira.infra.bundle.schema`` rewrites ``schema.json``; a test keeps the file and the
models in step, so the documented format is the one the loader checks.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pydantic import TypeAdapter

from ira.infra.bundle.format import (
    CURRENT_VERSION,
    Expectations,
    Manifest,
    ModelCall,
    Observation,
    Outcome,
    SourceEvent,
)

SCHEMA_FILE = Path(__file__).with_name("schema.json")

_FILES: dict[str, tuple[Any, str]] = {
    "bundle.json": (Manifest, "what was recorded; format_version absent = 1"),
    "events.json": (list[SourceEvent], "the source events, with arrival offsets"),
    "observations.jsonl": (list[Observation], "one JSON object per line: a tool call and its result or error"),
    "model_calls.jsonl": (list[ModelCall], "one JSON object per line: an LLM call by request fingerprint"),
    "outcome.json": (Outcome, "the original run's outcome, for the comparison"),
    "expectations.json": (Expectations, "optional pass/fail rules for a replay"),
}


def bundle_schema() -> dict[str, Any]:
    defs: dict[str, Any] = {}
    properties: dict[str, Any] = {}
    for name, (model, description) in _FILES.items():
        schema = TypeAdapter(model).json_schema(ref_template="#/$defs/{model}")
        defs.update(schema.pop("$defs", {}))
        properties[name] = {**schema, "description": description}
    properties["runbooks/"] = {"type": "object", "additionalProperties": {"type": "string"},
                               "description": "runbook file name -> markdown content"}
    return {"$schema": "https://json-schema.org/draft/2020-12/schema", "title": "ira scenario bundle",
            "description": f"A bundle directory; each property is a file. Current format_version: {CURRENT_VERSION}.",
            "type": "object", "required": ["bundle.json", "events.json"], "properties": properties, "$defs": defs}


def render() -> str:
    return json.dumps(bundle_schema(), indent=2, sort_keys=True) + "\n"


if __name__ == "__main__":
    SCHEMA_FILE.write_text(render(), encoding="utf-8")
    print(f"wrote {SCHEMA_FILE}")
