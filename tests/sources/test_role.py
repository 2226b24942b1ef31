"""The role as ``ira dev`` / ``ira worker --role gateway`` load it: entry point, routes, idle loop."""

from __future__ import annotations

import asyncio
import json
import uuid

import httpx
from sqlalchemy import select

from ira.core.envelope import Topic, topic_name
from ira.runtime.http import create_app
from ira.runtime.platform import Platform
from ira.runtime.role import load_roles
from ira.runtime.store.schema import outbox
from ira.runtime.wiring import build_relay
from tests.eventually import eventually
from tests.sources.harness import AM, AM_TOKEN, bearer, fixture, watch_topic


async def test_the_registered_role_stores_then_the_relay_puts_it_on_the_platforms_topic(platform: Platform) -> None:
    assert platform.settings.ingest.ack == "store"  # the default
    role = load_roles()["sources"]
    app = create_app(metrics=platform.metrics, routers=role.routers(platform))
    payload = fixture("alertmanager_payload.json")
    payload["alerts"][0]["labels"]["run"] = uuid.uuid4().hex  # the prod prefix's marks outlive this test
    del payload["alerts"][0]["fingerprint"]
    topic = topic_name(Topic.ALERTS, platform.settings.environment)  # shared with other tests: read only
    async with watch_topic(platform.kafka_bootstrap, topic) as received, \
            httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://ira.test") as client:
        response = await client.post(AM, content=json.dumps(payload).encode(), headers=bearer(AM_TOKEN))
        assert response.status_code == 202 and response.json()["accepted"] == 1
        [event_id] = response.json()["event_ids"]
        async with platform.db.reader() as conn:  # stored before the answer: no relay has run yet
            stored = (await conn.execute(select(outbox.c.message_id, outbox.c.awaits, outbox.c.sent_at))).all()
        assert [tuple(row) for row in stored] == [(event_id, "triage", None)]
        stop = asyncio.Event()
        relay = asyncio.create_task(build_relay(platform).run(stop))
        try:
            await eventually(lambda: event_id in {r.envelope.message_id for r in received}, timeout=20)
        finally:
            stop.set()
            await asyncio.wait_for(relay, 10)
    [record] = [r for r in received if r.envelope.message_id == event_id]
    assert record.key == f"demo:{record.envelope.payload['fingerprint']}"
    assert b"ira_source_ingest_seconds" in platform.metrics.render()


async def test_the_role_has_no_loop_and_returns_on_stop(platform: Platform) -> None:
    stop = asyncio.Event()
    task = asyncio.create_task(load_roles()["sources"].run(platform, stop))
    stop.set()
    await asyncio.wait_for(task, timeout=1)


async def test_routers_can_be_built_twice_on_one_platform(platform: Platform) -> None:
    role = load_roles()["sources"]
    first, second = role.routers(platform), role.routers(platform)  # one set of metric series, not a clash
    assert [r.route for r in (*first, *second)] == ["/v1/sources/{kind}/{source_id}"] * 2  # type: ignore[union-attr]
