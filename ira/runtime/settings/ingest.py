"""The webhook's commit point: when a 202 may be answered (``ingest:`` in ira.yaml)."""

from __future__ import annotations

from datetime import timedelta
from typing import Literal

from ira.runtime.settings.section import Duration, Section


class IngestSettings(Section):
    """``ack: store`` (the default) answers 202 once the request's events are committed to the
    store's outbox; ``ack: broker`` once the broker acknowledged them, which is safe only with
    an external, replicated Kafka (the producer always asks for ``acks=all``)."""

    ack: Literal["store", "broker"] = "store"
    """store: the database is the commit point; broker: the broker's ack is (external Kafka only)."""
    commit_timeout: Duration = timedelta(seconds=5)
    """A store commit not done by then is answered 503 + Retry-After (nothing is marked)."""
