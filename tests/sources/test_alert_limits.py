"""Counting alerts, not only requests (issue #16): at most ``max_alerts_per_request`` per request
(413 naming the limit) and ``alerts_per_second`` per source and tenant (a token bucket in Redis,
429 + Retry-After); a refused request stores nothing and marks nothing, so its retry is taken."""

from __future__ import annotations

import json
from collections import Counter
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from redis.asyncio import Redis
from sqlalchemy import select

from ira.core.clock import FrozenClock
from ira.runtime.settings import load_settings
from ira.runtime.settings.ingest import IngestSettings
from ira.runtime.store.database import Database
from ira.runtime.store.group_commit import GroupCommit
from ira.runtime.store.schema import outbox
from ira.sources.ratelimit import AlertLimits
from tests.sources.harness import AM, AM_TOKEN, GRAFANA_TOKEN, Harness, bearer, fixture, harness, settings

T0 = datetime(2026, 4, 29, 10, 0, tzinfo=UTC)


def batch(first: int, count: int) -> bytes:
    """One Alertmanager request with ``count`` distinct alerts (numbered from ``first``)."""
    payload = fixture("alertmanager_payload.json")
    template = payload["alerts"][0]
    payload["alerts"] = [
        {**template, "fingerprint": f"fp{n:06d}", "labels": {**template["labels"], "instance": f"10.1.0.{n}:9100"}}
        for n in range(first, first + count)]
    return json.dumps(payload).encode()


def limited_edge(db: Database, redis: Redis, redis_prefix: str, clock: FrozenClock, **limits: Any) -> Harness:
    """``ingest.ack: store`` on ``db``; every source with ``limits`` (alerts_per_second, ...)."""
    return harness(environment="prod", redis=redis, outbox=GroupCommit(db, clock, timeout=timedelta(seconds=5)),
                   clock=clock, redis_prefix=redis_prefix, config=settings(**limits))


async def stored(db: Database) -> Counter[str]:
    async with db.reader() as conn:
        return Counter((await conn.execute(select(outbox.c.message_id))).scalars())


async def test_more_alerts_than_a_request_may_carry_is_413_naming_the_limit_and_nothing_is_stored(
    db: Database, redis: Redis, redis_prefix: str
) -> None:
    edge = limited_edge(db, redis, redis_prefix, FrozenClock(T0), max_alerts_per_request=5)
    async with edge.client() as client:
        refused = await client.post(AM, content=batch(0, 6), headers=bearer(AM_TOKEN))
        fits = await client.post(AM, content=batch(0, 5), headers=bearer(AM_TOKEN))

    assert refused.status_code == 413
    [error] = refused.json()["errors"]
    assert error["code"] == "too_many_alerts"
    assert error["limit"] == {"name": "max_alerts_per_request", "value": 5}
    assert (fits.status_code, fits.json()["accepted"]) == (202, 5)  # the refused request marked nothing
    assert sorted(await stored(db)) == sorted(fits.json()["event_ids"])


async def test_alerts_over_the_bucket_are_429_with_retry_after_and_nothing_of_the_request_is_accepted(
    db: Database, redis: Redis, redis_prefix: str
) -> None:
    # Given a source refilled at 10 alerts/s, holding 10
    clock = FrozenClock(T0)
    edge = limited_edge(db, redis, redis_prefix, clock, alerts_per_second=10, max_alerts_per_request=10)
    async with edge.client() as client:
        # When 8 alerts arrive, then 5 more in the same instant
        first = await client.post(AM, content=batch(0, 8), headers=bearer(AM_TOKEN))
        refused = await client.post(AM, content=batch(100, 5), headers=bearer(AM_TOKEN))
        stored_after_refusal = await stored(db)
        clock.advance(timedelta(seconds=1))
        retried = await client.post(AM, content=batch(100, 5), headers=bearer(AM_TOKEN))

    # Then the 5 are refused whole (3 tokens short: back in 1 s), and accepted whole on the retry
    assert (first.status_code, first.json()["accepted"]) == (202, 8)
    assert refused.status_code == 429 and refused.headers["retry-after"] == "1"
    [error] = refused.json()["errors"]
    assert error["code"] == "alert_rate_limited"
    assert error["limit"] == {"name": "alerts_per_second", "value": 10}
    assert sorted(stored_after_refusal) == sorted(first.json()["event_ids"])
    assert (retried.status_code, retried.json()["accepted"]) == (202, 5)
    assert len(await stored(db)) == 13


async def test_the_alert_bucket_is_shared_by_replicas_and_kept_per_source(
    db: Database, redis: Redis, redis_prefix: str
) -> None:
    clock = FrozenClock(T0)
    replicas = [limited_edge(db, redis, redis_prefix, clock, alerts_per_second=4, max_alerts_per_request=4)
                for _ in range(2)]
    answers = []
    for replica, first in ((replicas[0], 0), (replicas[1], 10)):
        async with replica.client() as client:
            answers.append(await client.post(AM, content=batch(first, 3), headers=bearer(AM_TOKEN)))
    grafana = fixture("grafana_webhook_payload.json")
    async with replicas[1].client() as client:
        other_source = await client.post("/v1/sources/grafana/grafana", json=grafana, headers=bearer(GRAFANA_TOKEN))

    assert [a.status_code for a in answers] == [202, 429]  # 3 + 3 > 4, whichever replica took them
    assert other_source.status_code == 202


@pytest.mark.parametrize(("per_second", "per_request", "capacity"), [(1000, 1000, 1000), (0.5, 20, 20),
                                                                     (5000, 100, 5000), (2.5, 1, 3)])
def test_a_full_bucket_always_holds_an_allowed_request(per_second: float, per_request: int, capacity: int) -> None:
    source = settings(alerts_per_second=per_second, max_alerts_per_request=per_request).sources[0]
    limits = AlertLimits.of(source, IngestSettings())
    assert limits.capacity == capacity >= limits.max_per_request


def test_sources_without_their_own_limits_take_the_ingest_defaults() -> None:
    source = settings().sources[0].model_copy(update={"alerts_per_second": None})
    limits = AlertLimits.of(source, IngestSettings(max_alerts_per_request=250, alerts_per_second=40))
    assert (limits.max_per_request, limits.per_second) == (250, 40)
    assert (IngestSettings().max_alerts_per_request, IngestSettings().alerts_per_second) == (1000, 1000)


def test_the_alert_limits_come_from_the_file_and_the_environment() -> None:
    loaded = load_settings({"IRA_INGEST_MAX_ALERTS_PER_REQUEST": "200", "IRA_INGEST_ALERTS_PER_SECOND": "50"})
    assert (loaded.ingest.max_alerts_per_request, loaded.ingest.alerts_per_second) == (200, 50)
    assert (load_settings({}).ingest.max_alerts_per_request, load_settings({}).ingest.alerts_per_second) == (1000, 1000)
