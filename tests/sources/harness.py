"""What the sources tests share: settings, the app around a real Redis and broker, a topic reader.

The app is the real lane (``build_lane``, the role's own wiring) on the real HTTP shell;
only the topic's environment and the Redis key prefix are the test's own.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
import uuid
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import uvicorn
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from prometheus_client import CollectorRegistry
from redis.asyncio import Redis
from starlette.types import ASGIApp

from ira.core.clock import Clock
from ira.core.envelope import Envelope, Topic, topic_name
from ira.core.errors import InvalidMessageError
from ira.runtime.bus.pack import unpacked
from ira.runtime.http import create_app
from ira.runtime.settings import Settings
from ira.runtime.settings.ingest import IngestSettings
from ira.runtime.telemetry import Metrics
from ira.sources.accept import Outbox, Publisher
from ira.sources.auth import sign
from ira.sources.main import build_lane
from tests.eventually import eventually
from tests.processes import free_port

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"  # copies of ../shared/fixtures
"""Real Alertmanager and Grafana payloads, in ``shared/`` beside the repository (here and in CI)."""
AM_TOKEN = "dev-am-token"
GRAFANA_TOKEN = "dev-grafana-token"
CHANGE_TOKEN = "dev-change-token"
GENERIC_SECRET = "dev-generic-secret"
TENANT = "demo"
AM = "/v1/sources/alertmanager/am"
SENTINEL_KEY = b"__test_sentinel__"


def fixture(name: str) -> dict[str, Any]:
    return json.loads((FIXTURES / name).read_text())


def distinct_alert(number: int) -> bytes:
    """The Alertmanager fixture with an alert of its own (another instance label), no fingerprint."""
    payload = fixture("alertmanager_payload.json")
    alert = payload["alerts"][0]
    alert["labels"]["instance"] = f"10.0.{number // 250}.{number % 250}:9100"
    del alert["fingerprint"]  # computed from the labels, as for a sender that omits it
    return json.dumps(payload).encode()


def settings(**source_overrides: Any) -> Settings:
    """The dev sources (``am``, ``grafana``, ``generic``, ``changes``), overrides applied to each."""
    sources = [
        {"id": "am", "kind": "alertmanager", "bearer_token": AM_TOKEN},
        {"id": "grafana", "kind": "grafana", "bearer_token": GRAFANA_TOKEN},
        {"id": "generic", "kind": "generic", "hmac_secret": GENERIC_SECRET},
        {"id": "changes", "kind": "change", "bearer_token": CHANGE_TOKEN, "default_environment": "prod"},
    ]
    return Settings.model_validate({"tenant": TENANT, "sources": [
        {"rate_limit_per_second": 100_000, "alerts_per_second": 100_000_000, **source, **source_overrides}
        for source in sources]})


@dataclass
class Harness:
    """One test's app: its topic, its Redis prefix, its metrics."""

    app: ASGIApp
    topic: str
    metrics: Metrics
    redis_prefix: str

    def client(self) -> httpx.AsyncClient:
        return httpx.AsyncClient(transport=httpx.ASGITransport(app=self.app), base_url="http://ira.test")


def harness(
    *, environment: str, redis: Redis, clock: Clock, redis_prefix: str, publisher: Publisher | None = None,
    outbox: Outbox | None = None, config: Settings | None = None,
) -> Harness:
    """The lane with ``ingest.ack: store`` when given an ``outbox``, else ``broker`` on ``publisher``."""
    metrics = Metrics(CollectorRegistry())
    ack = IngestSettings(ack="store" if outbox is not None else "broker")
    config = (config or settings()).model_copy(update={"ingest": ack})
    lane = build_lane(config, redis=redis, publisher=publisher, outbox=outbox, clock=clock,
                      registry=metrics.registry, redis_prefix=redis_prefix, environment=environment)
    return Harness(app=create_app(metrics=metrics, routers=[lane]), topic=topic_name(Topic.ALERTS, environment),
                   metrics=metrics, redis_prefix=redis_prefix)


def bearer(token: str) -> dict[str, str]:
    return {"authorization": f"Bearer {token}"}


def signed(body: bytes, *, at: float | None = None, secret: str = GENERIC_SECRET) -> dict[str, str]:
    """The generic source's headers for ``body``, signed at ``at`` (unix seconds, default now)."""
    timestamp = str(int(time.time() if at is None else at))
    return {"x-ira-timestamp": timestamp, "x-ira-signature": sign(secret, timestamp, body),
            "content-type": "application/json"}


def metric(metrics: Metrics, name: str, labels: Mapping[str, str]) -> float:
    return metrics.registry.get_sample_value(name, dict(labels)) or 0.0


@dataclass(frozen=True)
class Received:
    """One message read back from the topic."""

    key: str | None
    envelope: Envelope


async def read_topic(bootstrap: str, topic: str, *, timeout: float = 20.0) -> list[Received]:
    """Every message on ``topic`` so far, in partition order (sentinels excluded).

    Exact, with no "wait a bit for stragglers": the app answers only after the broker acked,
    so once the answers are in, a sentinel produced to each partition now lands behind every
    event, and reading up to the sentinels reads everything. (End offsets are not used: the
    embedded broker under-reports them for multi-record batches.)
    """
    marker = uuid.uuid4().hex.encode()
    partitions = await _write_sentinels(bootstrap, topic, marker)
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False,
                                auto_offset_reset="earliest")
    await consumer.start()
    try:
        consumer.assign(partitions)
        await consumer.seek_to_beginning(*partitions)
        return await _read_to_sentinels(consumer, marker, set(partitions), timeout)
    finally:
        await consumer.stop()


async def _write_sentinels(bootstrap: str, topic: str, marker: bytes) -> list[TopicPartition]:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all")
    await producer.start()
    try:
        numbers = sorted(await producer.partitions_for(topic))
        for number in numbers:
            await producer.send_and_wait(topic, value=marker, key=SENTINEL_KEY, partition=number)
    finally:
        await producer.stop()
    return [TopicPartition(topic, number) for number in numbers]


async def _read_to_sentinels(
    consumer: AIOKafkaConsumer, marker: bytes, waiting: set[TopicPartition], timeout: float
) -> list[Received]:
    found: list[Received] = []
    deadline = time.monotonic() + timeout
    while waiting:
        assert time.monotonic() < deadline, f"sentinels of {sorted(waiting)} not read within {timeout}s"
        for tp, records in (await consumer.getmany(*waiting, timeout_ms=200)).items():
            for record in unpacked(records):  # a relay pass's alerts travel as packs
                if record.key == SENTINEL_KEY:
                    if record.value == marker:
                        waiting.discard(tp)
                        break
                    continue  # an earlier read's sentinel
                found.append(Received(record.key.decode() if record.key else None, Envelope.from_bytes(record.value)))
    return found


@contextlib.asynccontextmanager
async def watch_topic(bootstrap: str, topic: str) -> AsyncIterator[list[Received]]:
    """A list that fills with the topic's envelopes (from the beginning) while the block runs.

    Read-only, unlike :func:`read_topic`: safe on a topic other tests share.
    """
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False,
                                auto_offset_reset="earliest")
    await consumer.start()
    found: list[Received] = []

    async def pump() -> None:
        while True:
            for records in (await consumer.getmany(timeout_ms=200)).values():
                for record in unpacked(records):
                    with contextlib.suppress(InvalidMessageError):  # a shared topic may hold others' poison
                        found.append(Received(record.key.decode() if record.key else None,
                                              Envelope.from_bytes(record.value)))

    try:
        await consumer.topics()  # fetches metadata for every topic
        partitions = [TopicPartition(topic, p) for p in sorted(consumer.partitions_for_topic(topic) or ())]
        consumer.assign(partitions)
        await consumer.seek_to_beginning(*partitions)
        task = asyncio.create_task(pump())
        try:
            yield found
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
    finally:
        await consumer.stop()


@contextlib.asynccontextmanager
async def serving(app: ASGIApp) -> AsyncIterator[str]:
    """Serve ``app`` with uvicorn on a free loopback port; yields its base URL."""
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_config=None, access_log=False,
                                           lifespan="off", timeout_graceful_shutdown=2))
    server.capture_signals = contextlib.nullcontext  # type: ignore[method-assign]  # pytest owns signals
    task = asyncio.create_task(server.serve())
    try:
        await eventually(lambda: server.started or task.done(), timeout=10, message="uvicorn started")
        assert not task.done(), "uvicorn stopped during startup"
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        await asyncio.wait_for(task, 10)
