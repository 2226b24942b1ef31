"""One call to a ticket system's REST API, with ira's retry rules and error translation.

* 2xx                                   -> the response
* 429 (or GitHub's 403 rate limit)      -> waited out (``Retry-After``, else doubling backoff)
                                           and sent again: a rate-limited request was not applied
* 5xx, lookups                          -> likewise waited out and sent again (a read is harmless)
* 5xx, a create (``resend_on_5xx=False``)-> ConnectorUnavailableError at once: the server may have
                                           applied it, so sending again could file a second issue;
                                           the caller looks the key up instead
* a wait past ``max_retry_wait`` or the last attempt -> ConnectorUnavailableError (retryable),
                                           carrying ``retry_after``
* any other 4xx                         -> ConnectorRejectedError with the provider's own message
* transport failures and timeouts       -> ConnectorUnavailableError (``map_http_errors``)
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from email.utils import parsedate_to_datetime
from typing import Any

import httpx

from ira.connectors.http import map_http_errors
from ira.core.errors import ConnectorRejectedError, ConnectorUnavailableError
from ira.runtime.settings.tickets import RemoteCallSettings

Sleep = Callable[[float], Awaitable[None]]
MESSAGE_LIMIT = 500


class RemoteApi:
    """An injected httpx client plus the retry policy of one configured ticket system."""

    def __init__(self, client: httpx.AsyncClient, system: str, policy: RemoteCallSettings, *,
                 sleep: Sleep = asyncio.sleep) -> None:
        self.client, self.system, self._policy, self._sleep = client, system, policy, sleep

    async def call(self, method: str, path: str, *, json: Any = None, params: dict[str, str] | None = None,
                   resend_on_5xx: bool = True) -> httpx.Response:
        """Send until an answer that is not "later"; see the module docstring for the rules."""
        for attempt in range(1, self._policy.max_attempts + 1):
            async with map_http_errors(self.system):
                response = await self.client.request(method, path, json=json, params=params)
            if response.is_success:
                return response
            later = is_rate_limited(response) or (response.status_code >= 500 and resend_on_5xx)
            if not later:
                raise self._error(response)
            wait = retry_wait(response, attempt, backoff=self._policy.backoff)
            if attempt == self._policy.max_attempts or wait > self._policy.max_retry_wait:
                raise ConnectorUnavailableError(self.system, describe(response), retry_after=wait)
            await self._sleep(wait.total_seconds())
        raise AssertionError("unreachable: the loop returns or raises")

    def _error(self, response: httpx.Response) -> ConnectorUnavailableError | ConnectorRejectedError:
        if response.status_code >= 500:
            return ConnectorUnavailableError(self.system, describe(response),
                                             retry_after=retry_after(response))
        return ConnectorRejectedError(self.system, describe(response))


def is_rate_limited(response: httpx.Response) -> bool:
    """429, or GitHub's way of saying it: 403 with ``Retry-After`` or no requests remaining."""
    if response.status_code == 429:
        return True
    return response.status_code == 403 and (
        "retry-after" in response.headers or response.headers.get("x-ratelimit-remaining") == "0")


def retry_after(response: httpx.Response) -> timedelta | None:
    """``Retry-After`` as seconds or an HTTP date; GitHub's ``x-ratelimit-reset`` epoch too."""
    value = response.headers.get("retry-after")
    if value is not None and value.strip().isdigit():
        return timedelta(seconds=int(value))
    if value is not None:
        try:
            return max(timedelta(0), parsedate_to_datetime(value) - datetime.now(UTC))
        except (TypeError, ValueError):
            return None
    reset = response.headers.get("x-ratelimit-reset")
    if reset is not None and reset.isdigit():
        return max(timedelta(0), datetime.fromtimestamp(int(reset), UTC) - datetime.now(UTC))
    return None


def retry_wait(response: httpx.Response, attempt: int, *, backoff: timedelta) -> timedelta:
    """What the server asked for, else ``backoff`` doubling per attempt."""
    return retry_after(response) or backoff * (2 ** (attempt - 1))


def describe(response: httpx.Response) -> str:
    """``HTTP 400: <the provider's message>``: Jira's ``errorMessages``/``errors``, GitHub's
    ``message``/``errors``, else the start of the body."""
    return f"HTTP {response.status_code}: {provider_message(response)}"[:MESSAGE_LIMIT]


def provider_message(response: httpx.Response) -> str:
    try:
        body = response.json()
    except ValueError:
        return response.text.strip()[:MESSAGE_LIMIT] or response.reason_phrase
    if not isinstance(body, dict):
        return str(body)[:MESSAGE_LIMIT]
    parts = [str(m) for m in body.get("errorMessages") or []]
    if isinstance(body.get("errors"), dict):
        parts += [f"{field}: {text}" for field, text in body["errors"].items()]
    if body.get("message"):
        parts.append(str(body["message"]))
    if isinstance(body.get("errors"), list):
        parts += [_github_error(e) for e in body["errors"]]
    return "; ".join(p for p in parts if p) or response.reason_phrase


def _github_error(error: Any) -> str:
    if not isinstance(error, dict):
        return str(error)
    if error.get("message"):
        return str(error["message"])
    return " ".join(str(error[k]) for k in ("resource", "field", "code") if error.get(k))
