"""The faust app behind triage's noise control (runs only in the noise worker child process).

Topology::

    ira.alerts.v1 ──route──> <app_id>-events (keyed tenant|group_key) ──tally──> Redis verdicts
                                                    │
                         tables: last-status (per alert), transitions + arrivals (hopping windows)

``route`` re-keys every alert event by its group key, so one group's counts live in one
partition even when its alerts (keyed by fingerprint on ``ira.alerts.v1``) are spread over
several. ``tally`` counts firing<->resolved transitions and arrivals per group in a hopping
window over the event's ``received_at`` (event time, so a replay counts like the original),
and writes a verdict to Redis when a group is flapping or storming. The tables are faust's
derived state: each has a changelog topic and is rebuilt from it (or, if that is gone, from
``ira.alerts.v1`` itself) after a restart. They are never the authority: triage enforces the
cooldown in SQL whether or not this app runs.

Settings that make faust work on the embedded Tansu broker: ``producer_max_batch_size=1``
(table recovery reads the changelog back correctly only with one record per batch), every
topic created with the app's ``topic_partitions`` (the source topic exists beforehand with
the same count; an auto-created one fails with PartitionsMismatch), session/heartbeat/request
timeouts short enough for Tansu's slow group joins, and the web server off.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import faust
from pydantic import ValidationError

from ira.core.alert import ALERT_MESSAGE, AlertEvent, AlertStatus
from ira.core.envelope import Envelope
from ira.core.errors import InvalidMessageError
from ira.core.model import Model
from ira.runtime.settings.triage import TriageSettings
from ira.triage.grouping import group_key, group_labels
from ira.triage.noise import RedisNoiseState, noise_verdict


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


class NoiseEvent(faust.Record, serializer="json"):
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


def is_transition(previous: str, status: str) -> bool:
    """A change between firing and resolved (an alert's first event is not one)."""
    return previous in (AlertStatus.FIRING, AlertStatus.RESOLVED) and previous != status


def build_app(config: NoiseWorkerConfig) -> faust.App:
    """The app with its topics, tables and agents; nothing connects until the worker starts it."""
    settings = TriageSettings.model_validate(config.triage)
    app = faust.App(
        config.app_id, broker=[f"kafka://{s.strip()}" for s in config.bootstrap.split(",")], store="memory://",
        datadir=config.data_dir, web_enabled=False, web_host="127.0.0.1", producer_max_batch_size=1,
        topic_partitions=config.partitions, topic_replication_factor=1, consumer_auto_offset_reset="earliest",
        broker_session_timeout=6.0, broker_heartbeat_interval=1.0, broker_request_timeout=20.0,
        broker_commit_interval=1.0, table_cleanup_interval=30.0)
    _wire(app, config, settings)
    return app


def _wire(app: faust.App, config: NoiseWorkerConfig, settings: TriageSettings) -> None:
    size, step = settings.noise.window.total_seconds(), settings.noise.hop.total_seconds()
    source = app.topic(config.source_topic, key_serializer="raw", value_serializer="raw")
    events = app.topic(f"{config.app_id}-events", key_type=str, value_type=NoiseEvent, internal=True)
    last_status = app.Table("last-status", default=str)
    transitions = _Window(app, "transitions", size=size, step=step)
    arrivals = _Window(app, "arrivals", size=size, step=step)
    verdicts = _Verdicts(config, settings)
    app.agent(source, name="route")(_router(settings, events))

    @app.agent(events)
    async def tally(stream: Any) -> None:
        async for event in stream:
            group = f"{event.tenant_id}|{event.group_key}"
            alert = f"{group}|{event.fingerprint}"
            if is_transition(last_status[alert], event.status):
                transitions.count[group] += 1
            last_status[alert] = event.status
            arrivals.count[group] += 1
            await verdicts.judge(event, transitions=transitions.read[group].value(),
                                 alerts=arrivals.read[group].value())


def _router(settings: TriageSettings, events: Any) -> Any:
    """Re-key alert events by group key, so one group's counts live in one partition."""

    async def route(stream: Any) -> None:
        async for value in stream:
            event = noise_event(value, settings)
            if event is not None:
                await events.send(key=f"{event.tenant_id}|{event.group_key}", value=event)

    return route


class _Window:
    """A hopping-window count on event time, with a writer and a reader view of one table.

    Every event adds to all ``size/step`` windows holding its ``at``. The reader asks for the
    *earliest* of them (the one reaching furthest back, covering the last ``size - step`` to
    ``size`` seconds): its clock is shifted by ``size - step``, because faust's ``value()``
    returns the latest window holding the given time. (``current()``/``delta()`` would not do:
    they read by the Kafka record's timestamp whatever the table's relativity says.)
    """

    def __init__(self, app: faust.App, name: str, *, size: float, step: float) -> None:
        table = app.Table(name, default=int).hopping(size, step, expires=timedelta(seconds=size * 2))
        self.count = table.relative_to_field(NoiseEvent.at)  # type: ignore[arg-type]  # a faust field descriptor
        self.read = table.relative_to(lambda event: event.value.at - (size - step))  # type: ignore[attr-defined]


class _Verdicts:
    """Turns window counts into Redis verdicts (the Redis client is made on first use, in faust's loop)."""

    def __init__(self, config: NoiseWorkerConfig, settings: TriageSettings) -> None:
        self._config, self._settings = config, settings
        self._state: RedisNoiseState | None = None

    async def judge(self, event: NoiseEvent, *, transitions: int, alerts: int) -> None:
        at = datetime.fromtimestamp(event.at, UTC)
        verdict = noise_verdict(transitions=transitions, alerts=alerts, at=at, settings=self._settings.noise,
                                cooldown=self._settings.cooldown)
        now = datetime.now(UTC)
        if verdict is None or verdict.until <= now:
            return  # calm, or an old event replayed during a rebuild
        await self._redis().record(event.tenant_id, event.group_key, verdict, now=now)

    def _redis(self) -> RedisNoiseState:
        if self._state is None:
            from redis.asyncio import Redis

            self._state = RedisNoiseState(Redis.from_url(self._config.redis_url), prefix=self._config.key_prefix)
        return self._state


def config_from_stdin(raw: str) -> NoiseWorkerConfig:
    return NoiseWorkerConfig.model_validate(json.loads(raw))
