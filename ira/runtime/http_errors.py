"""The one error shape every HTTP answer of ira uses (DESIGN.md §6), in a module of its own so
the middlewares in front of the app (body limits, the gate) build it without importing the app::

    {"errors": [{"code": "...", "message": "...", "field": "body.alerts.0.labels" | null}]}
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from fastapi.responses import JSONResponse


def error_entry(code: str, message: str, field: str | None = None) -> dict[str, str | None]:
    return {"code": code, "message": message, "field": field}


def error_response(
    status: int, code: str, message: str, *, field: str | None = None, headers: Mapping[str, str] | None = None
) -> JSONResponse:
    """The one error shape, for routes that answer an error without raising (413, 429...)."""
    return JSONResponse({"errors": [error_entry(code, message, field)]}, status_code=status, headers=headers)


def json_body(value: Any) -> bytes:
    return json.dumps(value, separators=(",", ":")).encode()
