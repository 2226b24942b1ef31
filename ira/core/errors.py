"""Errors raised on purpose. The class decides what a worker does with the message.

* PlatformError
  + DomainError                 never retried -> DLQ or a 4xx
    - IllegalTransitionError    a state machine was asked for a move its table forbids
    - InvalidMessageError       an envelope or payload that does not validate (poison)
    - BudgetExhaustedError      a reservation larger than what is available
    - ArtifactTooLargeError     an artifact over the configured size limit
    - NotFoundError             the tenant has no such object
    - AuthenticationError       no or unknown credentials (HTTP 401)
    - PermissionDeniedError     known principal, missing role (HTTP 403)
  + TransientError              retried with backoff
    - ConcurrentUpdateError     a compare-and-set lost: re-read, then decide again
      - StaleEpochError         the writer no longer owns the step (a newer epoch claimed it)
    - ConnectorUnavailableError a remote system is down or rate limited
    - BrokerUnavailableError    Kafka did not acknowledge
    - StoreUnavailableError     the database did not commit (or did not answer in time)
  + DuplicateMessageError       already applied -> acknowledge and drop
  + ConnectorRejectedError      the remote said no (4xx) -> recorded as a failed outcome
  + ConfigError                 invalid configuration; names the key

Only worker loops catch broadly; everywhere else wraps with ``raise ... from exc``.
"""

from __future__ import annotations

from datetime import timedelta


class PlatformError(Exception):
    """Root of every error ira raises on purpose. ``code`` is stable and machine-readable."""

    code = "platform_error"
    retryable = False

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class DomainError(PlatformError):
    """A rule said no. Retrying the same input gives the same answer."""

    code = "domain_error"


class IllegalTransitionError(DomainError):
    code = "illegal_transition"

    def __init__(self, kind: str, current: str, target: str) -> None:
        super().__init__(f"{kind} cannot move from {current} to {target}")
        self.kind, self.current, self.target = kind, current, target


class InvalidMessageError(DomainError):
    code = "invalid_message"


class BudgetExhaustedError(DomainError):
    code = "budget_exhausted"

    def __init__(self, dimension: str, requested: int, available: int) -> None:
        super().__init__(f"budget {dimension}: requested {requested}, available {available}")
        self.dimension, self.requested, self.available = dimension, requested, available


class ArtifactTooLargeError(DomainError):
    code = "artifact_too_large"


class NotFoundError(DomainError):
    code = "not_found"


class AuthenticationError(DomainError):
    code = "unauthenticated"


class PermissionDeniedError(DomainError):
    code = "forbidden"


class TransientError(PlatformError):
    """Something outside the rules failed; the same input may succeed later."""

    code = "transient"
    retryable = True

    def __init__(self, message: str, *, retry_after: timedelta | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class ConcurrentUpdateError(TransientError):
    """A compare-and-set found another version: nothing was written; re-read and decide."""

    code = "concurrent_update"


class StaleEpochError(ConcurrentUpdateError):
    """The writer's ``owner_epoch`` is no longer current: it lost the step and must stop."""

    code = "stale_epoch"
    retryable = False


class ConnectorUnavailableError(TransientError):
    code = "connector_unavailable"

    def __init__(self, system: str, reason: str, *, retry_after: timedelta | None = None) -> None:
        super().__init__(f"{system} unavailable: {reason}", retry_after=retry_after)
        self.system = system


class BrokerUnavailableError(TransientError):
    code = "broker_unavailable"


class StoreUnavailableError(TransientError):
    code = "store_unavailable"


class DuplicateMessageError(PlatformError):
    """The message was applied before; acknowledge it and do nothing."""

    code = "duplicate"


class ConnectorRejectedError(PlatformError):
    code = "connector_rejected"

    def __init__(self, system: str, reason: str) -> None:
        super().__init__(f"{system} rejected the request: {reason}")
        self.system = system


class ConfigError(PlatformError):
    """Invalid configuration. ``key`` is the dotted path of the offending setting."""

    code = "invalid_config"

    def __init__(self, key: str, message: str) -> None:
        super().__init__(f"{key}: {message}")
        self.key = key
