"""The coordinator with the real broker: relay, scanner, coordinator, scripted agents and
the notifier as asyncio tasks of the test, on one unique environment (``bus_env``)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import timedelta

import httpx

from ira.connectors.tickets.builtin import BuiltinTicketSystem
from ira.coordinator.deps import Deps
from ira.coordinator.handlers import step_handlers
from ira.coordinator.worker import CoordinatorWorker
from ira.core.clock import Clock, SystemClock
from ira.core.envelope import Envelope, Topic, topic_name
from ira.notifier.webhook import WebhookChannel
from ira.notifier.worker import Notifier, notifier_consumer
from ira.runtime.bus.consumer import ConsumerRunner, ConsumerSettings
from ira.runtime.bus.producer import BusProducer
from ira.runtime.bus.record import RecordMeta
from ira.runtime.dispatch import StepDispatcher
from ira.runtime.relay import OutboxRelay
from ira.runtime.scanner import Scanner
from ira.runtime.store.database import Database
from tests.coordinator.harness import config
from tests.coordinator.scripted import ScriptedInvestigators

FAST = ConsumerSettings(session_timeout=timedelta(seconds=2), fetch_wait=timedelta(milliseconds=100))


@dataclass
class Live:
    deps: Deps
    producer: BusProducer
    scripted: ScriptedInvestigators
    worker: CoordinatorWorker
    environment: str

    async def publish(self, envelope: Envelope) -> None:
        await self.producer.publish(topic_name(Topic.INCIDENTS, self.environment),
                                    f"{envelope.tenant_id}:{envelope.payload.get('incident_id')}", envelope)


def agents_consumer(scripted: ScriptedInvestigators, dispatcher: StepDispatcher, *, bootstrap: str,
                    producer: BusProducer, environment: str, tasks: set[asyncio.Task[None]]) -> ConsumerRunner:
    """What the agents role looks like from outside: its own group on ira.steps.v1."""

    async def handle(envelope: Envelope, meta: RecordMeta) -> None:
        task = asyncio.create_task(dispatcher.handle_wakeup(envelope))
        tasks.add(task)
        task.add_done_callback(tasks.discard)

    return ConsumerRunner(bootstrap=bootstrap, group_id=f"{environment}.agents-test",
                          topics=[topic_name(Topic.STEPS, environment)], name="agents-test", handler=handle,
                          producer=producer, dlq_topic=topic_name(Topic.DLQ, environment), inbox=False, settings=FAST)


@asynccontextmanager
async def live_stack(
    db: Database, *, bootstrap: str, environment: str, webhook_url: str | None = None, clock: Clock | None = None,
    behaviour: dict[str, str] | None = None, lease: timedelta = timedelta(seconds=30), **cfg: object,
) -> AsyncIterator[Live]:
    clock = clock or SystemClock()
    deps = Deps(db=db, clock=clock, config=config(environment, **cfg), tickets=BuiltinTicketSystem(db, clock))
    scripted = ScriptedInvestigators(db, clock, behaviour=behaviour or {})
    agent_tasks: set[asyncio.Task[None]] = set()
    async with BusProducer(bootstrap) as producer, httpx.AsyncClient() as http:
        dispatcher = StepDispatcher(db=db, clock=clock, handlers=step_handlers(deps), owner="coordinator-live",
                                    lease=lease)
        worker = CoordinatorWorker(deps, dispatcher, bootstrap=bootstrap, producer=producer, consumer=FAST,
                                   max_concurrent=32)
        loops: list[object] = [
            worker,
            OutboxRelay(db=db, publisher=producer, clock=SystemClock(), poll_interval=timedelta(milliseconds=20)),
            Scanner(db=db, clock=clock, environment=environment, interval=timedelta(milliseconds=500),
                    quiet=timedelta(seconds=3)),
            agents_consumer(scripted, scripted.dispatcher(lease_seconds=lease.total_seconds()), bootstrap=bootstrap,
                            producer=producer, environment=environment, tasks=agent_tasks)]
        if webhook_url:
            notifier = Notifier(db, WebhookChannel(webhook_url, "hook-secret", http, clock=SystemClock(),
                                                   timeout=timedelta(seconds=2)), SystemClock(),
                                backoff=timedelta(milliseconds=50))
            loops.append(notifier_consumer(notifier, bootstrap=bootstrap, producer=producer,
                                           environment=environment, settings=FAST))
        stop = asyncio.Event()
        tasks = [asyncio.create_task(loop.run(stop)) for loop in loops]  # type: ignore[attr-defined]
        try:
            yield Live(deps=deps, producer=producer, scripted=scripted, worker=worker, environment=environment)
        finally:
            scripted.release.set()
            stop.set()
            await asyncio.wait_for(asyncio.gather(*tasks, return_exceptions=True), timeout=30)
            await asyncio.gather(*agent_tasks, return_exceptions=True)
