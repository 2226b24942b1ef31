"""How a consumer runner is tuned: one frozen value, built from ira.yaml by
:func:`ira.runtime.wiring.consumer_settings` (tests build their own)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta


@dataclass(frozen=True)
class ConsumerSettings:
    """Consumer tuning. The defaults work on Apache Kafka and on the embedded Tansu broker
    (whose group joins take about half the session timeout, so tests use ~2 s sessions)."""

    session_timeout: timedelta = timedelta(seconds=6)
    heartbeat_interval: timedelta = timedelta(milliseconds=500)
    fetch_wait: timedelta = timedelta(milliseconds=500)
    """Longest a fetch waits at the broker for records (the embedded broker answers only when
    it ends, so it is how late a record published into an idle partition can arrive there)."""
    idle_fetch_wait: timedelta | None = None
    """The fetch wait once the consumer has had no record for ``idle_after``, if longer than
    ``fetch_wait`` (None: always ``fetch_wait``). A short ``fetch_wait`` is a broker round trip
    per wait even when nothing comes; paced, the first record after a quiet spell arrives within
    this, the rest within ``fetch_wait`` again (:mod:`ira.runtime.bus.pace`)."""
    idle_after: timedelta = timedelta(seconds=10)
    idle_wake: timedelta = timedelta(milliseconds=500)
    """How often an idle consumer's loop comes round (its lag gauges, a stop) when its fetches
    bring nothing, if ``fetch_wait`` is shorter: records wake it the moment a fetch brings them,
    so a short fetch wait no longer costs a loop round per fetch (50 a second at 20 ms)."""
    max_records: int = 500
    batch_size: int = 1
    """Records per database transaction (inbox mode); 1 = one transaction per record."""
    retry_backoff: timedelta = timedelta(milliseconds=100)
    max_retry_backoff: timedelta = timedelta(seconds=10)
    max_unexpected_attempts: int = 5
    """Tries for an exception outside ira's error tree before the record is dead-lettered."""
    max_hold: timedelta = timedelta(seconds=1)
    """Longest a partition waits on a failing record (in-place retries) before it is parked."""
    park_poll: timedelta = timedelta(seconds=1)
    """How often the consumer tries its due parked records again (and reports its park)."""
    park_lease: timedelta = timedelta(seconds=30)
    """A claimed parked record another replica may take over after (its claimer died)."""
    request_timeout: timedelta = timedelta(seconds=10)
    faults: frozenset[str] = frozenset()
    """Armed fault points (tests): ``consumer.<name>.after_apply`` dies after the handler's
    transaction committed and before the offset is committed."""


def after_apply(name: str) -> str:
    """The fault point of consumer ``name`` between its store commit and its offset commit."""
    return f"consumer.{name}.after_apply"
