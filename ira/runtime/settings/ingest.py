"""The webhook's commit point: when a 202 may be answered (``ingest:`` in ira.yaml)."""

from __future__ import annotations

from datetime import timedelta
from typing import Literal

from pydantic import Field

from ira.core import limits
from ira.runtime.settings.section import Duration, Section


class IngestSettings(Section):
    """``ack: store`` (the default) answers 202 once the request's events are committed to the
    store's outbox; ``ack: broker`` once the broker acknowledged them, which is safe only with
    an external, replicated Kafka (the producer always asks for ``acks=all``)."""

    ack: Literal["store", "broker"] = "store"
    """store: the database is the commit point; broker: the broker's ack is (external Kafka only)."""
    commit_timeout: Duration = timedelta(seconds=5)
    """A store commit not done by then is answered 503 + Retry-After (nothing is marked)."""
    max_alerts_per_request: int = Field(default=1000, ge=1, le=limits.ALERTS_PER_REQUEST_MAX)
    """A request carrying more alerts (or change events) is refused whole with 413
    ``too_many_alerts``. Alertmanager sends one request per alert group: keep ``max_alerts`` of its
    webhook_config at or below this, so a large group is truncated there rather than refused here.
    A source's own ``max_alerts_per_request`` overrides it."""
    alerts_per_second: float = Field(default=1000.0, gt=0)
    """Alerts per second a source may send (per source and tenant, a token bucket holding
    ``max(alerts_per_second, max_alerts_per_request)``): a request the bucket cannot cover
    whole is refused with 429 + Retry-After and nothing of it is accepted. Counted next to the
    request rate (``rate_limit_per_second``); a source's own ``alerts_per_second`` overrides it."""
