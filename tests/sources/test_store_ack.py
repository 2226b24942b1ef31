"""``ingest.ack: store``: a 202 only after the store's commit, commits shared by concurrent requests,
marks only for what is stored, and a store that cannot commit answered 503 with nothing marked."""

from __future__ import annotations

import asyncio
import json
import sqlite3
from collections import Counter
from datetime import timedelta
from pathlib import Path

import pytest
from redis.asyncio import Redis
from sqlalchemy import func, select

from ira.core.clock import SystemClock
from ira.core.errors import ConfigError
from ira.runtime.settings import load_settings
from ira.runtime.store.database import Database
from ira.runtime.store.group_commit import GroupCommit
from ira.runtime.store.migrate import upgrade
from ira.runtime.store.outbox import URGENT_HEADER
from ira.runtime.store.schema import outbox
from ira.sources.dedupe import EdgeDedupe
from tests.eventually import eventually
from tests.sources.harness import AM, AM_TOKEN, Harness, bearer, distinct_alert, harness, serving
from tests.sources.rawhttp import post_many

ENVIRONMENT = "prod"


def store_edge(db: Database, redis: Redis, redis_prefix: str, *, timeout: timedelta = timedelta(seconds=5)
               ) -> tuple[Harness, GroupCommit]:
    """The lane with ``ingest.ack: store`` on ``db``, and its group commit (to count commits)."""
    commits = GroupCommit(db, SystemClock(), timeout=timeout)
    return harness(environment=ENVIRONMENT, redis=redis, outbox=commits, clock=SystemClock(),
                   redis_prefix=redis_prefix), commits


async def stored_ids(db: Database) -> Counter[str]:
    async with db.reader() as conn:
        return Counter((await conn.execute(select(outbox.c.message_id))).scalars())


async def test_concurrent_requests_share_commits_and_each_hears_its_own_outcome(
    db: Database, redis: Redis, redis_prefix: str
) -> None:
    # Given a gateway answering after the store's commit
    edge, commits = store_edge(db, redis, redis_prefix)
    bodies = [distinct_alert(n % 100) for n in range(200)]  # every alert twice, at the same moment

    # When 200 requests arrive at once
    async with serving(edge.app) as url:
        answers = await post_many(url, AM, bodies, bearer(AM_TOKEN), connections=100)

    # Then far fewer transactions than requests, one row per alert, and each alert accepted once
    assert {a.status for a in answers} == {202}
    results = [json.loads(a.body) for a in answers]
    assert 0 < commits.commits < len(bodies) / 4
    accepted = Counter(r["event_ids"][0] for r in results if r["accepted"] == 1)
    assert sum(r["accepted"] + r["duplicates"] for r in results) == 200
    assert accepted == await stored_ids(db) and len(accepted) == 100 and set(accepted.values()) == {1}


async def test_a_copy_of_a_stored_alert_is_a_duplicate_by_its_mark_without_a_commit(
    db: Database, redis: Redis, redis_prefix: str
) -> None:
    edge, commits = store_edge(db, redis, redis_prefix)
    async with edge.client() as client:
        first = await client.post(AM, content=distinct_alert(1), headers=bearer(AM_TOKEN))
        after_first = commits.commits
        again = await client.post(AM, content=distinct_alert(1), headers=bearer(AM_TOKEN))

    assert (first.json()["accepted"], again.json()["duplicates"]) == (1, 1)
    assert commits.commits == after_first  # the mark, set after the commit, answered it
    assert await redis.exists(EdgeDedupe(redis, prefix=redis_prefix).key("am", first.json()["event_ids"][0])) == 1


async def test_an_unmarked_copy_of_a_stored_alert_is_a_duplicate_by_the_outbox(
    db: Database, redis: Redis, redis_prefix: str
) -> None:
    # Given an alert stored by a gateway that died before it could set the mark
    edge, commits = store_edge(db, redis, redis_prefix)
    async with edge.client() as client:
        [event_id] = (await client.post(AM, content=distinct_alert(2), headers=bearer(AM_TOKEN))).json()["event_ids"]
        mark = EdgeDedupe(redis, prefix=redis_prefix).key("am", event_id)

        async def marked() -> bool:  # the 202 does not wait for it
            return await redis.exists(mark) == 1

        await eventually(marked)
        await redis.delete(mark)

        # When the sender re-sends it
        again = await client.post(AM, content=distinct_alert(2), headers=bearer(AM_TOKEN))

    # Then it is a duplicate (the store holds it once) and now marked
    assert again.status_code == 202 and again.json()["duplicates"] == 1
    assert await stored_ids(db) == Counter({event_id: 1})
    assert await redis.exists(EdgeDedupe(redis, prefix=redis_prefix).key("am", event_id)) == 1


async def test_a_store_that_cannot_commit_means_503_nothing_marked_and_the_retry_accepted(
    tmp_path: Path, redis: Redis, redis_prefix: str
) -> None:
    # Given a gateway on SQLite whose write lock another process holds (commit timeout 1 s)
    url = tmp_path / "ira.db"
    db = Database.create(f"sqlite:///{url}")
    await upgrade(db)
    edge, _ = store_edge(db, redis, redis_prefix, timeout=timedelta(seconds=1))
    bodies = [distinct_alert(n) for n in range(20)]
    holder = sqlite3.connect(url, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    try:
        async with serving(edge.app) as base:
            # When 20 alerts arrive while it is locked
            refused = await post_many(base, AM, bodies, bearer(AM_TOKEN))
            holder.execute("ROLLBACK")
            # Then each is refused with 503 + Retry-After and leaves no mark: the retry is accepted
            assert Counter(r.status for r in refused) == {503: 20}
            assert {json.loads(r.body)["errors"][0]["code"] for r in refused} == {"store_unavailable"}
            assert all(int(r.headers["retry-after"]) >= 1 for r in refused)
            assert await redis.keys(f"{redis_prefix}*seen*") == []
            retried = await post_many(base, AM, bodies, bearer(AM_TOKEN))
    finally:
        holder.close()
    assert [json.loads(r.body)["accepted"] for r in retried] == [1] * 20
    async with db.reader() as conn:
        assert (await conn.execute(select(func.count()).select_from(outbox))).scalar() == 20
    await db.close()


async def test_a_thousand_copies_at_once_are_stored_once_and_accepted_once(
    db: Database, redis: Redis, redis_prefix: str
) -> None:
    edge, _ = store_edge(db, redis, redis_prefix)
    async with serving(edge.app) as url:
        answers = await post_many(url, AM, [distinct_alert(7)] * 1000, bearer(AM_TOKEN), connections=100)
    results = [json.loads(a.body) for a in answers]
    assert Counter(r["accepted"] for r in results) == {1: 1, 0: 999}
    assert len(await stored_ids(db)) == 1


async def test_a_request_cancelled_during_its_commit_leaves_the_store_consistent(
    db: Database, redis: Redis, redis_prefix: str
) -> None:
    # A sender that hangs up mid-commit: its rows may be stored, but nothing marks them, so its
    # retry is answered from the store (a duplicate of what is there), never lost
    edge, commits = store_edge(db, redis, redis_prefix)
    async with edge.client() as client:
        posting = asyncio.create_task(client.post(AM, content=distinct_alert(9), headers=bearer(AM_TOKEN)))
        while commits.commits == 0 and not posting.done():
            await asyncio.sleep(0)
        posting.cancel()
        await asyncio.gather(posting, return_exceptions=True)
        retry = await client.post(AM, content=distinct_alert(9), headers=bearer(AM_TOKEN))
    assert retry.status_code == 202
    assert await stored_ids(db) == Counter({retry.json()["event_ids"][0]: 1})


def test_ack_broker_is_refused_on_the_embedded_broker_and_allowed_on_an_external_one() -> None:
    with pytest.raises(ConfigError) as refused:
        load_settings({"IRA_INGEST_ACK": "broker"})
    assert refused.value.key == "ingest"
    assert "embedded broker keeps records in memory" in refused.value.message
    external = load_settings({"IRA_INGEST_ACK": "broker", "IRA_KAFKA_BOOTSTRAP": "kafka-1:9092,kafka-2:9092"})
    assert (external.ingest.ack, load_settings({}).ingest.ack) == ("broker", "store")


async def test_the_first_alert_of_a_new_group_is_stored_urgent_and_its_follow_ups_are_not(
    db: Database, redis: Redis, redis_prefix: str
) -> None:
    # Given a gateway answering after the store's commit
    edge, _ = store_edge(db, redis, redis_prefix)
    other = json.loads(distinct_alert(9))
    other["alerts"][0]["labels"]["alertname"] = "AnotherIncident"  # another group (by alertname)
    # When a group's alert arrives, then two more of it, then another group's
    async with edge.client() as client:
        ids = [(await client.post(AM, content=body, headers=bearer(AM_TOKEN))).json()["event_ids"][0]
               for body in (distinct_alert(1), distinct_alert(2), distinct_alert(3), json.dumps(other).encode())]
    # Then the first alert of each group is urgent (its record's header: triage takes it first), the follow-ups not
    async with db.reader() as conn:
        headers = dict((await conn.execute(select(outbox.c.message_id, outbox.c.headers))).tuples().all())
    assert [headers[i].get(URGENT_HEADER) == "true" for i in ids] == [True, False, False, True]
