"""What the ingest endpoint refuses, and why; the route maps each class to a status.

* DomainError (core)
  + PayloadTooLargeError        body over the size limit (413)
    - TooManyAlertsError        more alerts in one request than ``max_alerts_per_request`` (413)
  + InvalidMessageError (core)
    - MalformedPayloadError     not JSON at all (400, ``malformed_json``)
    - InvalidPayloadError       JSON, but not the kind's schema; one problem per field (422)
* TransientError (core)
  + RateLimitedError            the source sent more than its rate (429 + Retry-After)
    - AlertRateLimitedError     more alerts than its ``alerts_per_second`` bucket holds (429)
  + EdgeUnavailableError        Redis (dedupe marks, rate counters) did not answer (503)

Unknown sources and kinds are core's NotFoundError (404), bad credentials its
AuthenticationError (401), an unacknowledged produce its BrokerUnavailableError (503).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from ira.core.errors import DomainError, InvalidMessageError, TransientError


@dataclass(frozen=True)
class Problem:
    """One thing wrong with a payload; ``field`` is a dotted path such as ``body.alerts.0.labels``."""

    code: str
    message: str
    field: str | None


class PayloadTooLargeError(DomainError):
    code = "payload_too_large"


class TooManyAlertsError(PayloadTooLargeError):
    """The request is refused whole; ``limit`` names the setting and its value for the sender."""

    code = "too_many_alerts"
    limit_name = "max_alerts_per_request"

    def __init__(self, source_id: str, *, count: int, limit: int) -> None:
        super().__init__(f"the request carries {count} alerts; source {source_id} takes at most {limit} "
                         f"per request ({self.limit_name})")
        self.count, self.limit = count, limit


class MalformedPayloadError(InvalidMessageError):
    code = "malformed_json"


class InvalidPayloadError(InvalidMessageError):
    """The body is JSON but does not fit the schema; ``problems`` lists every mismatch."""

    code = "invalid_payload"

    def __init__(self, problems: list[Problem]) -> None:
        super().__init__(f"{len(problems)} problem(s) in the payload")
        self.problems = problems


class RateLimitedError(TransientError):
    code = "rate_limited"

    def __init__(self, source_id: str, *, retry_after: timedelta) -> None:
        super().__init__(f"source {source_id} is over its rate limit", retry_after=retry_after)


class EdgeUnavailableError(TransientError):
    code = "edge_unavailable"


class AlertRateLimitedError(RateLimitedError):
    code = "alert_rate_limited"
    limit_name = "alerts_per_second"

    def __init__(self, source_id: str, *, alerts: int, limit: float, retry_after: timedelta) -> None:
        TransientError.__init__(self, f"source {source_id} is over its {self.limit_name} ({limit:g}): "
                                f"{alerts} alert(s) refused, nothing accepted", retry_after=retry_after)
        self.limit = limit
