"""Slack's answers translated once, here, into ira's error tree.

* PlatformError
  + ConnectorRejectedError
    + SlackRejectedError      ``ok: false`` with a code retrying cannot fix (``invalid_auth``,
                               ``channel_not_found``, ``not_in_channel``, ...): ``permanent``
  + ConnectorUnavailableError
    + SlackUnavailableError    ``ratelimited`` (with Retry-After), 5xx, transport failures;
                               ``maybe_applied`` when the request left and no answer came back

Callers never import slack_sdk or aiohttp for error handling.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import timedelta

import aiohttp
from slack_sdk.errors import SlackApiError

from ira.core.errors import ConnectorRejectedError, ConnectorUnavailableError

SYSTEM = "slack"
RETRYABLE_CODES = frozenset({"ratelimited", "internal_error", "fatal_error", "service_unavailable",
                             "request_timeout", "team_added_to_org"})
"""Every other ``ok: false`` code is a definite no: the request was refused as it is."""


class SlackRejectedError(ConnectorRejectedError):
    """Slack refused the call; the same call will be refused again."""

    code = "slack_rejected"

    def __init__(self, error: str) -> None:
        super().__init__(SYSTEM, error)
        self.error = error


class SlackUnavailableError(ConnectorUnavailableError):
    """Slack could not take the call now; ``maybe_applied`` says whether it may have anyway."""

    def __init__(self, error: str, *, retry_after: timedelta | None = None, maybe_applied: bool = False) -> None:
        super().__init__(SYSTEM, error, retry_after=retry_after)
        self.error = error
        self.maybe_applied = maybe_applied


@asynccontextmanager
async def map_slack_errors() -> AsyncIterator[None]:
    """Translate what slack_sdk and aiohttp raise inside the block."""
    try:
        yield
    except SlackApiError as exc:
        raise _from_api_error(exc) from exc
    except aiohttp.ClientConnectorError as exc:  # no connection: nothing was sent
        raise SlackUnavailableError(type(exc).__name__) from exc
    except (TimeoutError, aiohttp.ClientError) as exc:  # sent, answer lost
        raise SlackUnavailableError(type(exc).__name__, maybe_applied=True) from exc


def _from_api_error(exc: SlackApiError) -> SlackRejectedError | SlackUnavailableError:
    response = exc.response
    status = getattr(response, "status_code", 0)
    error = str(response.get("error") or f"http_{status}") if response is not None else "no_response"
    if error in RETRYABLE_CODES or status == 429 or status >= 500:
        return SlackUnavailableError(error, retry_after=_retry_after(response))
    return SlackRejectedError(error)


def _retry_after(response: object) -> timedelta | None:
    headers = getattr(response, "headers", None) or {}
    value = next((v for k, v in headers.items() if k.lower() == "retry-after"), None)
    return timedelta(seconds=int(value)) if value is not None and str(value).isdigit() else None
