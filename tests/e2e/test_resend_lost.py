"""Sent is not applied: a decision or a delivery request the broker acknowledged and then lost
is sent again by the scanner until its consumer applied it (real processes, a real broker)."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime
from pathlib import Path

import httpx
import pytest
from sqlalchemy import func, select, update

from ira.coordinator.notify import APPROVAL_REQUESTED, request_notification
from ira.core.decision import DECISIONS_INBOX
from ira.core.envelope import Topic, topic_name
from ira.core.states import DeliveryState
from ira.infra.tansu import EmbeddedKafka
from ira.runtime.store import outbox, runs
from ira.runtime.store.database import Database
from ira.runtime.store.migrate import upgrade
from ira.runtime.store.schema import deliveries, inbox
from ira.runtime.store.schema import outbox as outbox_table
from ira.runtime.store.schema import runs as runs_table
from tests.contracts.test_store import new_run
from tests.coordinator.harness import config as workflow_config
from tests.e2e.devprocess import DevProcess
from tests.eventually import eventually
from tests.sources.harness import AM_TOKEN, fixture

pytestmark = pytest.mark.slow
AM = "/v1/sources/alertmanager/am"


def unique_alert() -> bytes:
    """An alert no other test (sharing the machine's Redis and its dedupe marks) ever sends."""
    payload = fixture("alertmanager_payload.json")
    payload["alerts"][0]["labels"]["run"] = uuid.uuid4().hex
    del payload["alerts"][0]["fingerprint"]
    return json.dumps(payload).encode()


async def scalar(db: Database, query):  # type: ignore[no-untyped-def]
    async with db.reader() as conn:
        return (await conn.execute(query)).scalar()


async def test_a_create_run_decision_the_broker_lost_still_gets_exactly_one_run(
    private_kafka: EmbeddedKafka, redis_url: str, tmp_path: Path
) -> None:
    # Given the edge, triage and the relay as workers (no coordinator yet) on a memory-only broker
    db_url = f"sqlite:///{tmp_path / 'ira.db'}"
    db = Database.create(db_url)
    await upgrade(db)
    shared = {"IRA_DATABASE_URL": db_url, "IRA_KAFKA_BOOTSTRAP": private_kafka.bootstrap, "IRA_REDIS_URL": redis_url}
    roles = ("gateway", "triage", "relay")
    for home in (*roles, "dev"):
        (tmp_path / home).mkdir()
    workers = [DevProcess.on(tmp_path / role, command=("worker", "--role", role), **shared) for role in roles]
    dev = DevProcess.on(tmp_path / "dev", **shared)
    try:
        for worker in workers:
            await worker.start()

        # When an alert opens an incident, triage's create_run decision is published ...
        async with httpx.AsyncClient(base_url=workers[0].base_url) as client:
            posted = await client.post(AM, content=unique_alert(), headers={"authorization": f"Bearer {AM_TOKEN}"})
        assert posted.status_code == 202 and posted.json()["accepted"] == 1
        decisions = topic_name(Topic.INCIDENTS, "prod")
        sent = select(func.count()).select_from(outbox_table).where(
            outbox_table.c.topic == decisions, outbox_table.c.sent_at.is_not(None))
        await eventually(lambda: scalar(db, sent), timeout=60, message="the decision published")

        # ... and the broker loses it before any coordinator read it
        await private_kafka.kill()
        await private_kafka.start()
        for worker in workers:
            await worker.stop()

        # Then once the coordinator runs, the scanner's re-send gives the incident exactly one run
        await dev.start()
        one_run = select(func.count()).select_from(runs_table).where(runs_table.c.incident_id.is_not(None))
        await eventually(lambda: scalar(db, one_run), timeout=60, interval=0.5, message="a run")
        applied = select(func.count()).select_from(inbox).where(inbox.c.consumer == DECISIONS_INBOX)
        await eventually(lambda: scalar(db, applied), timeout=30, message="the decision in the coordinator's inbox")
        resends = await scalar(db, select(func.max(outbox_table.c.resends)).where(outbox_table.c.topic == decisions))
    finally:
        await dev.stop()
        for worker in workers:
            await worker.stop()
    assert await scalar(db, one_run) == 1 and resends >= 1
    await db.close()


async def test_a_delivery_request_marked_sent_but_lost_is_attempted(tmp_path: Path) -> None:
    # Given a notification whose request the relay marked sent, but which never reached the notifier
    dev = DevProcess.on(tmp_path)
    (tmp_path / "data").mkdir()
    db = Database.create(dev.database_url)
    await upgrade(db)
    at = datetime.now(UTC)
    async with db.transaction() as conn:
        run, _ = await runs.create_run(conn, new_run("demo"), at=at)
        message = await request_notification(conn, run, kind=APPROVAL_REQUESTED, data={"approval_id": "apr-1"},
                                             config=workflow_config(), at=at)
        await outbox.enqueue(conn, [message], at=at)
        await conn.execute(update(outbox_table).values(sent_at=at))
    notification_id = message.envelope.payload["notification_id"]
    attempts = select(deliveries.c.attempts).where(deliveries.c.notification_id == notification_id)
    assert await scalar(db, attempts) == 0

    # When ira runs, with no webhook configured (each attempt is recorded failed: "no channel")
    try:
        await dev.start()
        # Then the scanner sends the request again and the notifier attempts it, once
        await eventually(lambda: scalar(db, attempts), timeout=60, interval=0.5, message="an attempt")
        state = await scalar(db, select(deliveries.c.state).where(deliveries.c.notification_id == notification_id))
    finally:
        await dev.stop()
    assert await scalar(db, attempts) == 1 and state == DeliveryState.FAILED
    await db.close()
