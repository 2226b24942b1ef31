"""The HTTP seam of the read-only connectors: httpx errors become ira's, once, here.

* transport failures, timeouts, 429 and 5xx -> ConnectorUnavailableError (retryable)
* any other 4xx                               -> ConnectorRejectedError (the remote said no)
* a body over the size limit                  -> ConnectorRejectedError ``response too large``

Callers never import httpx for error handling.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import httpx

from ira.core.errors import ConnectorRejectedError, ConnectorUnavailableError


class ResponseTooLargeError(ConnectorRejectedError):
    code = "response_too_large"


@asynccontextmanager
async def map_http_errors(system: str) -> AsyncIterator[None]:
    """Translate httpx errors raised inside the block (async: it wraps awaited calls)."""
    try:
        yield
    except httpx.TimeoutException as exc:
        raise ConnectorUnavailableError(system, f"timeout ({type(exc).__name__})") from exc
    except httpx.TransportError as exc:
        raise ConnectorUnavailableError(system, type(exc).__name__) from exc


async def get_json_limited(
    client: httpx.AsyncClient, system: str, path: str, *, params: dict[str, str], max_bytes: int
) -> tuple[int, bytes]:
    """GET ``path`` and read at most ``max_bytes`` of the body; the status is checked by the caller
    (APIs like Prometheus put the reason for a 400 in the body)."""
    async with map_http_errors(system), client.stream("GET", path, params=params) as response:
        if response.status_code == 429 or response.status_code >= 500:
            raise ConnectorUnavailableError(system, f"HTTP {response.status_code}")
        body = bytearray()
        async for chunk in response.aiter_bytes():
            body.extend(chunk)
            if len(body) > max_bytes:
                raise ResponseTooLargeError(system, f"response larger than {max_bytes} bytes")
        return response.status_code, bytes(body)
