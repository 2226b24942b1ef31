"""The broker goes away mid-stream: senders hear 503 + Retry-After, nothing is half-accepted,
and once it is back their retries land exactly once."""

from __future__ import annotations

import json
from collections import Counter
from datetime import timedelta

from redis.asyncio import Redis

from ira.core.clock import SystemClock
from ira.infra.tansu import EmbeddedKafka
from ira.runtime.bus.admin import ensure_topics
from ira.runtime.bus.producer import BusProducer
from tests.eventually import eventually
from tests.kafka_fixtures import TEST_PARTITIONS, unique_environment
from tests.sources.harness import AM, AM_TOKEN, bearer, distinct_alert, harness, read_topic, serving
from tests.sources.rawhttp import post_many


async def send_until_accepted(url: str, bodies: list[bytes]) -> list[dict]:
    """What Alertmanager does: re-send what got a 503 until it is accepted (bounded)."""
    pending, answers = dict(enumerate(bodies)), {}

    async def all_accepted() -> bool:
        responses = await post_many(url, AM, list(pending.values()), bearer(AM_TOKEN))
        for index, response in zip(list(pending), responses, strict=True):
            assert response.status in (202, 503), response.body
            if response.status == 202:
                answers[index] = json.loads(response.body)
                del pending[index]
        return not pending

    await eventually(all_accepted, timeout=60, interval=0.5, message="every retry accepted")
    return [answers[index] for index in range(len(bodies))]


async def test_broker_stopped_means_503_and_after_restart_every_alert_lands_once(
    private_kafka: EmbeddedKafka, redis: Redis, redis_prefix: str
) -> None:
    environment = unique_environment()
    await ensure_topics(private_kafka.bootstrap, environment, partitions=TEST_PARTITIONS)
    before = [distinct_alert(n) for n in range(10)]
    during = [distinct_alert(n) for n in range(10, 20)]
    async with BusProducer(private_kafka.bootstrap, request_timeout=timedelta(seconds=1)) as producer:
        edge = harness(environment=environment, redis=redis, publisher=producer, clock=SystemClock(),
                       redis_prefix=redis_prefix)
        async with serving(edge.app) as url:
            first = await post_many(url, AM, before, bearer(AM_TOKEN))
            assert [json.loads(r.body)["accepted"] for r in first] == [1] * len(before)

            await private_kafka.stop()
            refused = await post_many(url, AM, during, bearer(AM_TOKEN))
            assert Counter(r.status for r in refused) == {503: len(during)}
            assert all(int(r.headers["retry-after"]) >= 1 for r in refused)
            assert {json.loads(r.body)["errors"][0]["code"] for r in refused} == {"broker_unavailable"}

            await private_kafka.start()  # same port, empty: the embedded broker keeps nothing
            await ensure_topics(private_kafka.bootstrap, environment, partitions=TEST_PARTITIONS)
            retried = await send_until_accepted(url, during)
            again = await post_many(url, AM, before, bearer(AM_TOKEN))

    assert [answer["accepted"] for answer in retried] == [1] * len(during)  # the 503s left no mark behind
    assert [json.loads(r.body)["duplicates"] for r in again] == [1] * len(before)  # the 202s kept theirs
    on_topic = Counter(r.envelope.message_id for r in await read_topic(private_kafka.bootstrap, edge.topic))
    assert on_topic == Counter(answer["event_ids"][0] for answer in retried)  # each once, none lost
