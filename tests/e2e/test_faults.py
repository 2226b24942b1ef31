"""Fault tests: kill real processes at chosen points; nothing is lost or applied twice."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncConnection

from ira.core.clock import SystemClock
from ira.core.commit import EventDraft, Fence, OutboxMessage, RunCommit, StepChange
from ira.core.envelope import Envelope, Topic, topic_name
from ira.core.events import RunEventType
from ira.core.ids import new_event_id
from ira.core.states import StepState
from ira.infra.tansu import EmbeddedKafka
from ira.runtime.bus.admin import ensure_topics
from ira.runtime.bus.consumer import ConsumerRunner, ConsumerSettings
from ira.runtime.bus.producer import BusProducer
from ira.runtime.bus.record import RecordMeta
from ira.runtime.dispatch import StepContext, StepDispatcher
from ira.runtime.relay import OutboxRelay
from ira.runtime.scanner import Scanner
from ira.runtime.store import outbox, runs
from ira.runtime.store.database import Database
from ira.runtime.store.migrate import upgrade
from ira.runtime.store.schema import inbox
from ira.runtime.store.schema import outbox as outbox_table
from tests.contracts.test_store import new_run
from tests.eventually import eventually
from tests.processes import free_port, ira_command

FAST = ConsumerSettings(session_timeout=timedelta(seconds=2), fetch_wait=timedelta(milliseconds=100))
PROD = "prod"


async def sqlite_db(tmp_path: Path) -> tuple[Database, str]:
    url = f"sqlite:///{tmp_path / 'ira.db'}"
    db = Database.create(url)
    await upgrade(db)
    return db, url


@asynccontextmanager
async def running(*loops: object) -> AsyncIterator[asyncio.Event]:
    """Run objects with ``run(stop)`` as tasks; stop and await them on exit."""
    stop = asyncio.Event()
    tasks = [asyncio.create_task(loop.run(stop)) for loop in loops]  # type: ignore[attr-defined]
    try:
        yield stop
    finally:
        stop.set()
        await asyncio.wait_for(asyncio.gather(*tasks, return_exceptions=True), timeout=30)


def ping(tenant: str = "acme") -> OutboxMessage:
    env = Envelope(message_id=new_event_id(), type="test.ping", tenant_id=tenant, occurred_at=datetime.now(UTC))
    return OutboxMessage(topic=topic_name(Topic.INCIDENTS, PROD), key=f"{tenant}:x", envelope=env)


async def test_relay_killed_between_publish_and_mark_is_dropped_by_the_inbox(
    private_kafka: EmbeddedKafka, redis_url: str, tmp_path: Path
) -> None:
    # Given an outbox row and a relay process armed to die right after the broker's ack
    await ensure_topics(private_kafka.bootstrap, PROD, partitions=1)
    db, url = await sqlite_db(tmp_path)
    message = ping()
    async with db.transaction() as conn:
        await outbox.enqueue(conn, [message], at=datetime.now(UTC))
    (tmp_path / "ira.yaml").write_text("runtime:\n  outbox_claim_lease: 1s\n  relay_poll_interval: 50ms\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("IRA_")} | {
        "IRA_CONFIG": str(tmp_path / "ira.yaml"), "IRA_DATABASE_URL": url, "IRA_REDIS_URL": redis_url,
        "IRA_KAFKA_BOOTSTRAP": private_kafka.bootstrap, "IRA_HTTP_PORT": str(free_port()),
        "IRA_FAULTS": "relay.after_publish"}

    # When the relay publishes and is killed before marking the row sent
    relay = subprocess.run([ira_command(), "worker", "--role", "relay"], env=env, cwd=tmp_path,
                           capture_output=True, text=True, timeout=60)
    assert relay.returncode == -signal.SIGKILL, relay.stdout + relay.stderr
    async with db.reader() as conn:
        assert (await conn.execute(select(outbox_table.c.sent_at))).scalar() is None

    # Then a consumer applies it once, and a second relay's re-publish is dropped by the inbox
    applied: list[str] = []

    async def handle(conn: AsyncConnection, envelope: Envelope, meta: RecordMeta) -> None:
        applied.append(envelope.message_id)

    async with BusProducer(private_kafka.bootstrap) as producer:
        consumer = ConsumerRunner(
            bootstrap=private_kafka.bootstrap, group_id="faults-relay", topics=[topic_name(Topic.INCIDENTS, PROD)],
            name="probe", handler=handle, producer=producer, dlq_topic=topic_name(Topic.DLQ, PROD), db=db,
            settings=FAST)
        second = OutboxRelay(db=db, publisher=producer, clock=SystemClock(), relay_id="second",
                             poll_interval=timedelta(milliseconds=50))
        async with running(consumer):
            await eventually(lambda: applied, timeout=20, message="first copy applied")
            async with running(second):
                await eventually(lambda: consumer.stats.duplicates == 1, timeout=20, message="duplicate dropped")
    assert applied == [message.envelope.message_id]
    async with db.reader() as conn:
        assert (await conn.execute(select(outbox_table.c.sent_at))).scalar() is not None
        assert len((await conn.execute(select(inbox))).all()) == 1
    await db.close()


async def test_broker_restart_loses_topics_and_the_scanner_rewakes_the_step_once(
    private_kafka: EmbeddedKafka, tmp_path: Path
) -> None:
    # Given a READY step whose wake-up reached the broker while no worker listened
    await ensure_topics(private_kafka.bootstrap, PROD, partitions=1)
    db, _ = await sqlite_db(tmp_path)
    new = new_run()
    async with db.transaction() as conn:
        await runs.create_run(conn, new, at=datetime.now(UTC))
    clock = SystemClock()
    async with BusProducer(private_kafka.bootstrap) as producer:
        relay = OutboxRelay(db=db, publisher=producer, clock=clock, poll_interval=timedelta(milliseconds=50),
                            lease=timedelta(seconds=2))
        assert await relay.relay_once() == 1

        # When the broker dies and comes back empty
        await private_kafka.kill()
        await private_kafka.start()
        runs_of_handler: list[int] = []

        async def handler(ctx: StepContext) -> None:
            runs_of_handler.append(ctx.claim.owner_epoch)
            async with db.transaction() as conn:
                current = await runs.get_run(conn, "acme", ctx.claim.run_id)
                await runs.commit(conn, RunCommit(
                    tenant_id="acme", run_id=ctx.claim.run_id, expected_version=current.state_version,
                    fence=Fence(step_id="metrics", owner_epoch=ctx.claim.owner_epoch),
                    steps=(StepChange(step_id="metrics", state=StepState.DONE),),
                    events=(EventDraft(type=RunEventType.AGENT_TURN),)), at=clock.now())

        dispatcher = StepDispatcher(db=db, clock=clock, handlers={"metrics": handler}, owner="w")
        topics = _Topics(private_kafka.bootstrap)
        scanner = Scanner(db=db, clock=clock, environment=PROD, admin=topics, quiet=timedelta(milliseconds=500),
                          interval=timedelta(milliseconds=200))
        consumer = ConsumerRunner(
            bootstrap=private_kafka.bootstrap, group_id="faults-steps", topics=[topic_name(Topic.STEPS, PROD)],
            name="steps", handler=lambda env, meta: dispatcher.handle_wakeup(env), producer=producer,
            dlq_topic=topic_name(Topic.DLQ, PROD), inbox=False, settings=FAST)

        # Then the scanner recreates the topics and re-wakes the step; it runs exactly once
        async with running(scanner, relay):
            await eventually(lambda: scanner.passes >= 1, timeout=20, message="a scanner pass")
            async with running(consumer):
                await eventually(lambda: runs_of_handler, timeout=30, message="handler ran")
                passes = scanner.passes
                await eventually(lambda: scanner.passes >= passes + 5, timeout=20, message="five more passes")
    assert runs_of_handler == [1]
    async with db.reader() as conn:
        handled = [e for e in await runs.list_events(conn, "acme", new.run_id) if e.type == RunEventType.AGENT_TURN]
    assert len(handled) == 1
    await db.close()


class _Topics:
    """The test's TopicAdmin: production's call, on one partition."""

    def __init__(self, bootstrap: str) -> None:
        self.bootstrap = bootstrap

    async def ensure_topics(self) -> list[str]:
        return await ensure_topics(self.bootstrap, PROD, partitions=1)

