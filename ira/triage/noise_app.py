"""The faust app behind triage's noise control (runs only in the noise worker child process).

Topology::

    ira.alerts.v1 ──route──> <app_id>-events (keyed tenant|group_key) ──tally──> Redis verdicts
                  (per fetch: one record per group and hop)     (counts per group and hop, in the agent)

``route`` takes the alerts of one fetch together (``stream.take``) and re-keys them by group:
one record per group and ``hop`` bucket of event time, carrying those alerts' fingerprints and
statuses in order. So one group's counts live in one partition even when its alerts (keyed by
fingerprint on ``ira.alerts.v1``) are spread over several, and a storm is one record per group
per fetch, not one per alert. ``tally`` keeps, in the agent, per group the arrivals and the
firing<->resolved transitions of each ``hop`` bucket and each alert's last status; the window
ending with a bucket is the sum of the last ``window/hop`` buckets (exactly faust's hopping
window, read at its earliest window holding the event: the last ``window`` of event time), and
it writes a verdict to Redis when a group is flapping or storming.

No tables, so no changelog record per update: a partition's state is rebuilt when an
assignment gives it to the worker (its start, or a rebalance after another worker stopped) by
reading the events topic up to the offsets ``tally`` committed — what was counted before, and
nothing it will count again — and dropped when a rebalance takes it away
(:mod:`ira.triage.noise_rebuild`). That is what lets the producer
batch: a faust table's recovery from its changelog reads back correctly on Tansu only with one
record per produce request (``producer_max_batch_size=1``), which made every record a request
of its own. The state is never the authority: triage enforces the cooldown in SQL whether or
not this app runs.

Other settings that make faust work on the embedded Tansu broker: every topic created with the
app's ``topic_partitions`` (the source topic exists beforehand with the same count; an
auto-created one fails with PartitionsMismatch), session/heartbeat/request timeouts short
enough for Tansu's slow group joins, and the web server off.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import faust
from pydantic import ValidationError

from ira.core.alert import ALERT_MESSAGE, AlertEvent, AlertStatus
from ira.core.envelope import Envelope
from ira.core.errors import InvalidMessageError
from ira.core.grouping import group_key, group_labels
from ira.core.model import Model
from ira.runtime.bus.pack import unpack
from ira.runtime.settings.triage import TriageSettings
from ira.triage.decide import NoiseVerdict
from ira.triage.noise import RedisNoiseState, noise_verdict, tally_key
from ira.triage.noise_rebuild import Ownership, rebuild, rebuild_key

log = logging.getLogger(__name__)
TAKE, TAKE_WITHIN = 1000, 0.2
"""``route`` re-keys up to this many alerts together, waiting at most this long (seconds) for them."""


class NoiseWorkerConfig(Model):
    """What the parent hands the child on stdin (stdin, not argv: the Redis URL may hold a password)."""

    bootstrap: str
    source_topic: str
    app_id: str
    partitions: int
    data_dir: str
    redis_url: str
    key_prefix: str
    triage: dict[str, Any]
    """``TriageSettings`` as JSON."""
    log_level: str = "info"

    @property
    def events_topic(self) -> str:
        return f"{self.app_id}-events"


@dataclass(frozen=True, slots=True)
class NoiseEvent:
    """One alert event as the windows see it."""

    tenant_id: str
    group_key: str
    fingerprint: str
    status: str
    at: float
    """``received_at`` as a POSIX timestamp: the window's clock."""


def noise_event(value: bytes | None, settings: TriageSettings) -> NoiseEvent | None:
    """The event to count for one record of ``ira.alerts.v1``; None for changes and poison."""
    try:
        envelope = Envelope.from_bytes(value)
        if envelope.type != ALERT_MESSAGE:
            return None
        alert = AlertEvent.model_validate(envelope.payload)
    except (InvalidMessageError, ValidationError):
        return None  # triage dead-letters it; here it is simply not counted
    key = group_key(group_labels(alert, settings.group_by_for(alert.tenant_id)))
    return NoiseEvent(tenant_id=alert.tenant_id, group_key=key, fingerprint=alert.fingerprint,
                      status=alert.status.value, at=alert.received_at.timestamp())


def noise_events(value: bytes | None, settings: TriageSettings) -> list[NoiseEvent]:
    """The events to count for one record of ``ira.alerts.v1``: a pack's alerts in order
    (:mod:`ira.runtime.bus.pack`), else the record's own; changes and poison are not counted."""
    members = unpack(value) if value is not None else None
    values = [m.value for m in members] if members is not None else [value]
    return [event for event in (noise_event(v, settings) for v in values) if event is not None]


def is_transition(previous: str, status: str) -> bool:
    """A change between firing and resolved (an alert's first event is not one)."""
    return previous in (AlertStatus.FIRING, AlertStatus.RESOLVED) and previous != status


def routed(events: Iterable[NoiseEvent], hop: float) -> list[tuple[bytes, bytes]]:
    """The events-topic records (key, value) for some alert events: one per group and ``hop`` bucket.

    A record holds its alerts' ``[fingerprint, status]`` in their order (an alert's events keep
    their order: its records share one source partition) and the latest ``at`` among them.
    """
    records: dict[tuple[str, str, int], dict[str, Any]] = {}
    for event in events:
        bucket = math.floor(event.at / hop)
        record = records.get((event.tenant_id, event.group_key, bucket))
        if record is None:
            record = records[(event.tenant_id, event.group_key, bucket)] = {
                "tenant_id": event.tenant_id, "group_key": event.group_key, "bucket": bucket, "at": event.at,
                "alerts": []}
        record["alerts"].append((event.fingerprint, event.status))
        record["at"] = max(record["at"], event.at)
    return [(f"{tenant}|{group}".encode(), json.dumps(record, separators=(",", ":")).encode())
            for (tenant, group, _), record in records.items()]


@dataclass(slots=True)
class Counted:
    """One events-topic record once counted: its group, the window's counts after it, its latest time."""

    tenant_id: str
    group_key: str
    added: int
    """The record's own alerts."""
    transitions: int
    alerts: int
    at: float


@dataclass
class NoiseWindows:
    """Per group: arrivals and transitions per ``hop`` bucket of event time; per alert: its last status.

    The window read after a record is the sum of the ``window/hop`` buckets ending with the
    record's (the last ``window`` of event time). Buckets more than a window behind the latest
    seen, and the last status of alerts quiet for longer than a window, are dropped: memory
    stays bounded under a storm of distinct alerts (a change after a quiet spell longer than
    the window is not counted as a transition — it is no flap).
    """

    window: float
    hop: float
    buckets: dict[str, dict[int, list[int]]] = field(default_factory=dict)
    """``tenant|group`` -> bucket -> [alerts, transitions]"""
    last: dict[str, tuple[str, float]] = field(default_factory=dict)
    """``tenant|group|fingerprint`` -> (status, at)"""
    latest: int | None = None
    """The latest bucket seen (the clock of the pruning)."""
    offsets: dict[int, dict[int, int]] = field(default_factory=dict)
    """events partition -> bucket -> offset of its first record there (what a rebuild must read from)"""
    next_offsets: dict[int, int] = field(default_factory=dict)
    """events partition -> the offset after the last record counted"""
    partition_of: dict[str, int] = field(default_factory=dict)
    """``tenant|group`` -> the events partition its records are on (the topic is keyed by group)"""

    @property
    def width(self) -> int:
        return max(1, math.ceil(self.window / self.hop))

    def count(self, value: bytes, *, partition: int | None = None, offset: int | None = None) -> Counted | None:
        """Count one events-topic record (at ``offset`` of ``partition``, if known); None if it is
        unreadable (skipped, as poison is)."""
        if partition is not None and offset is not None:
            self.next_offsets[partition] = offset + 1
        try:
            record = json.loads(value)
            tenant, key, bucket, at = record["tenant_id"], record["group_key"], int(record["bucket"]), record["at"]
            alerts = [(str(fingerprint), str(status)) for fingerprint, status in record["alerts"]]
        except (ValueError, KeyError, TypeError):
            log.warning("unreadable noise record skipped")
            return None
        group = f"{tenant}|{key}"
        transitions = 0
        for fingerprint, status in alerts:
            alert = f"{group}|{fingerprint}"
            previous = self.last.get(alert)
            if previous is not None and is_transition(previous[0], status):
                transitions += 1
            self.last[alert] = (status, at)
        counts = self.buckets.setdefault(group, {}).setdefault(bucket, [0, 0])
        counts[0] += len(alerts)
        counts[1] += transitions
        if partition is not None and offset is not None:
            self.offsets.setdefault(partition, {}).setdefault(bucket, offset)
            self.partition_of[group] = partition
        self._advance(bucket)
        window = [self.buckets[group].get(b) for b in range(bucket - self.width + 1, bucket + 1)]
        return Counted(tenant_id=tenant, group_key=key, added=len(alerts), alerts=sum(c[0] for c in window if c),
                       transitions=sum(c[1] for c in window if c), at=at)

    def _advance(self, bucket: int) -> None:
        if self.latest is not None and bucket <= self.latest:
            return
        self.latest = bucket
        oldest = bucket - self.width
        for group, counts in list(self.buckets.items()):
            for old in [b for b in counts if b <= oldest]:
                del counts[old]
            if not counts:
                del self.buckets[group]
        for firsts in self.offsets.values():
            for old in [b for b in firsts if b <= oldest]:
                del firsts[old]
        horizon = (oldest + 1) * self.hop  # where the window of the latest bucket begins
        for alert in [a for a, (_, at) in self.last.items() if at < horizon]:
            del self.last[alert]

    def partitions(self) -> set[int]:
        """The events partitions some of this state came from."""
        return set(self.next_offsets) | set(self.partition_of.values())

    def forget(self, partitions: set[int]) -> None:
        """Drop what came from ``partitions`` (another worker counts them now; if they come back,
        they are rebuilt, :class:`~ira.triage.noise_rebuild.Ownership`)."""
        groups = {group for group, partition in self.partition_of.items() if partition in partitions}
        if not groups and not partitions & set(self.next_offsets):
            return
        for group in groups:
            self.buckets.pop(group, None)
            del self.partition_of[group]
        prefixes = tuple(f"{group}|" for group in groups)
        for alert in [a for a in self.last if a.startswith(prefixes)] if prefixes else []:
            del self.last[alert]
        for partition in partitions:
            self.offsets.pop(partition, None)
            self.next_offsets.pop(partition, None)

    def rebuild_from(self) -> dict[int, int]:
        """Per events partition, the offset a rebuild must read from to get this state back: the
        first record of a bucket still kept (an alert's last status kept came with one of them),
        or, if none is, the offset after the last record counted."""
        return {partition: min(self.offsets.get(partition, {}).values(), default=after)
                for partition, after in self.next_offsets.items()}


def build_app(config: NoiseWorkerConfig, windows: NoiseWindows | None = None) -> faust.App:
    """The app with its topics and agents (``windows``: the state :func:`rebuild` made); nothing
    connects until the worker starts it."""
    settings = TriageSettings.model_validate(config.triage)
    app = faust.App(
        config.app_id, broker=[f"kafka://{s.strip()}" for s in config.bootstrap.split(",")], store="memory://",
        datadir=config.data_dir, web_enabled=False, web_host="127.0.0.1", producer_linger=0.005,
        topic_partitions=config.partitions, topic_replication_factor=1, consumer_auto_offset_reset="earliest",
        broker_session_timeout=6.0, broker_heartbeat_interval=1.0, broker_request_timeout=20.0,
        broker_commit_interval=1.0)
    _wire(app, config, settings, windows or new_windows(settings))
    return app


def new_windows(settings: TriageSettings) -> NoiseWindows:
    return NoiseWindows(window=settings.noise.window.total_seconds(), hop=settings.noise.hop.total_seconds())


def _wire(app: faust.App, config: NoiseWorkerConfig, settings: TriageSettings, windows: NoiseWindows) -> None:
    source = app.topic(config.source_topic, key_serializer="raw", value_serializer="raw")
    events = app.topic(config.events_topic, key_serializer="raw", value_serializer="raw", internal=True)
    verdicts = _Verdicts(config, settings)
    ownership = Ownership(windows, lambda partitions: rebuild(config, windows, only=partitions))

    @app.on_partitions_assigned.connect
    def assigned(_app: Any, /, *args: Any, signal: Any, **_kwargs: Any) -> None:
        """A rebalance: keep the state of the events partitions this worker holds now (faust's
        assignment replaces the previous one)."""
        ownership.assigned({tp.partition for tp in args[0] if tp.topic == config.events_topic})

    @app.agent(source)
    async def route(stream: Any) -> None:
        """Re-key a fetch's alerts by group: one record per group and hop bucket."""
        async for values in stream.take(TAKE, within=TAKE_WITHIN):
            parsed = [event for value in values for event in noise_events(value, settings)]
            for key, value in routed(parsed, windows.hop):
                await events.send(key=key, value=value)

    @app.agent(events)
    async def tally(stream: Any) -> None:
        async for batch in stream.take_events(TAKE, within=TAKE_WITHIN):
            await ownership.ready()  # partitions gained in a rebalance: their state first
            counted = [windows.count(e.value, partition=e.message.partition, offset=e.message.offset) for e in batch]
            await verdicts.judge([c for c in counted if c is not None], rebuild_from=windows.rebuild_from())


class _Verdicts:
    """Turns window counts into Redis verdicts (the Redis client is made on first use, in faust's loop)."""

    def __init__(self, config: NoiseWorkerConfig, settings: TriageSettings) -> None:
        self._config, self._settings = config, settings
        self._redis: Any = None

    async def judge(self, counted: Sequence[Counted], *, rebuild_from: dict[int, int]) -> None:
        """One Redis round trip for a batch: each group's verdict lasting longest, the tally's
        running totals (``alerts``, ``records``) under :func:`ira.triage.noise.tally_key`, and
        where a rebuild would read from (:func:`rebuild_key`)."""
        now = datetime.now(UTC)
        found: dict[tuple[str, str], NoiseVerdict] = {}
        for count in counted:
            verdict = noise_verdict(transitions=count.transitions, alerts=count.alerts,
                                    at=datetime.fromtimestamp(count.at, UTC), settings=self._settings.noise,
                                    cooldown=self._settings.cooldown)
            if verdict is None or verdict.until <= now:
                continue  # calm, or an old event replayed during a rebuild
            group = (count.tenant_id, count.group_key)
            if group not in found or verdict.until >= found[group].until:
                found[group] = verdict
        state = RedisNoiseState(self._client(), prefix=self._config.key_prefix)
        async with self._client().pipeline(transaction=False) as pipe:
            for (tenant_id, key), verdict in found.items():
                state.record_into(pipe, tenant_id, key, verdict, now=now)
            pipe.hincrby(tally_key(self._config.key_prefix), "records", len(counted))
            pipe.hincrby(tally_key(self._config.key_prefix), "alerts", sum(c.added for c in counted))
            if rebuild_from:
                pipe.hset(rebuild_key(self._config.key_prefix, self._config.app_id),
                          mapping={str(p): o for p, o in rebuild_from.items()})
            await pipe.execute()

    def _client(self) -> Any:
        if self._redis is None:
            from redis.asyncio import Redis

            self._redis = Redis.from_url(self._config.redis_url)
        return self._redis


def config_from_stdin(raw: str) -> NoiseWorkerConfig:
    return NoiseWorkerConfig.model_validate(json.loads(raw))
