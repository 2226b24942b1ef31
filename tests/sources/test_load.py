"""Many senders at once over real HTTP: the edge dedupe holds under concurrency, nothing is lost."""

from __future__ import annotations

import json
from collections import Counter

from ira.infra.tansu import EmbeddedKafka
from tests.sources.harness import AM, AM_TOKEN, Harness, bearer, distinct_alert, fixture, read_topic, serving
from tests.sources.rawhttp import post_many

SENDERS = 1_000


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
