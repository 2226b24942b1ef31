"""Many senders at once over real HTTP: the edge dedupe holds under concurrency, nothing is lost."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import AsyncIterator
from datetime import timedelta

import pytest

from ira.infra.tansu import EmbeddedKafka
from ira.runtime.bus.producer import BusProducer
from tests.sources.harness import AM, AM_TOKEN, Harness, bearer, distinct_alert, fixture, read_topic, serving
from tests.sources.rawhttp import post_many

SENDERS = 1_000


@pytest.fixture
async def producer(kafka: EmbeddedKafka) -> AsyncIterator[BusProducer]:
    """A 10 s ack timeout instead of the sources tests' 2 s: a thousand
    concurrent produces on a loaded CI machine can take longer than 2 s to be acked, which made
    these tests see 503 (broker unavailable) although nothing was lost. They test the dedupe
    under concurrency, not the broker's latency (tests/sources/test_broker_down.py does that)."""
    async with BusProducer(kafka.bootstrap, request_timeout=timedelta(seconds=10)) as bus_producer:
        yield bus_producer


async def post_all(base_url: str, bodies: list[bytes]) -> list[dict]:
    """Every body at once, one connection each; every answer must be a 202."""
    responses = await post_many(base_url, AM, bodies, bearer(AM_TOKEN), connections=len(bodies))
    assert Counter(r.status for r in responses) == {202: len(bodies)}
    return [json.loads(r.body) for r in responses]


async def test_a_thousand_concurrent_posts_of_one_alert_make_exactly_one_event(
    edge: Harness, kafka: EmbeddedKafka
) -> None:
    body = json.dumps(fixture("alertmanager_payload.json")).encode()
    async with serving(edge.app) as url:
        responses = await post_all(url, [body] * SENDERS)
    assert sum(r["accepted"] for r in responses) == 1
    assert sum(r["duplicates"] for r in responses) == SENDERS - 1
    assert len({r["event_ids"][0] for r in responses}) == 1
    received = await read_topic(kafka.bootstrap, edge.topic)
    assert len(received) == 1


async def test_a_thousand_distinct_alerts_make_a_thousand_events(edge: Harness, kafka: EmbeddedKafka) -> None:
    async with serving(edge.app) as url:
        responses = await post_all(url, [distinct_alert(n) for n in range(SENDERS)])
    assert sum(r["accepted"] for r in responses) == SENDERS
    received = await read_topic(kafka.bootstrap, edge.topic)
    ids = Counter(r.envelope.message_id for r in received)
    assert len(ids) == SENDERS and set(ids.values()) == {1}
    assert ids.keys() == {r["event_ids"][0] for r in responses}
