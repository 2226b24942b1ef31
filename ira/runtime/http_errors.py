"""The one error shape every HTTP answer of ira uses (DESIGN.md §6), in a module of its own so
the middlewares in front of the app (body limits, the gate) build it without importing the app::

    {"errors": [{"code": "...", "message": "...", "field": "body.alerts.0.labels" | null}]}

and the one mapping from ira's errors to a status and its headers, shared by the FastAPI
handlers and the lanes (``ira.runtime.http.Lane``): :func:`status_for`, :func:`error_headers`.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from datetime import timedelta
from typing import Any

from fastapi.responses import JSONResponse

from ira.core.errors import PlatformError


def error_entry(code: str, message: str, field: str | None = None) -> dict[str, str | None]:
    return {"code": code, "message": message, "field": field}


def error_response(
    status: int, code: str, message: str, *, field: str | None = None, headers: Mapping[str, str] | None = None
) -> JSONResponse:
    """The one error shape, for routes that answer an error without raising (413, 429...)."""
    return JSONResponse({"errors": [error_entry(code, message, field)]}, status_code=status, headers=headers)


def json_body(value: Any) -> bytes:
    return json.dumps(value, separators=(",", ":")).encode()


def status_for(exc: PlatformError, statuses: Mapping[type[PlatformError], int]) -> int:
    """The status of the nearest class of ``exc`` in ``statuses`` (its MRO); 500 when none is."""
    return next((statuses[c] for c in type(exc).__mro__ if c in statuses), 500)


def error_headers(exc: PlatformError, status: int) -> dict[str, str]:
    """401 names the scheme; 429 and 503 say when to come back (the error's ``retry_after``)."""
    if status == 401:
        return {"WWW-Authenticate": "Bearer"}
    if status in (429, 503):
        retry_after: timedelta = getattr(exc, "retry_after", None) or timedelta(seconds=1)
        return {"Retry-After": str(max(1, math.ceil(retry_after.total_seconds())))}
    return {}
