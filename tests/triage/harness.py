"""Running triage's handler against a real database, and reading back what it wrote."""

from __future__ import annotations

from datetime import timedelta

from sqlalchemy import select

from ira.core.alert import AlertEvent, Evaluation
from ira.core.clock import FrozenClock
from ira.core.commit import NewRun
from ira.core.decision import DECISION_MESSAGE, UPDATE_MESSAGE, IncidentDecision, IncidentUpdate
from ira.core.envelope import Envelope
from ira.core.errors import ConcurrentUpdateError
from ira.core.ids import new_id
from ira.runtime.bus.record import RecordMeta
from ira.runtime.settings.triage import TriageSettings
from ira.runtime.store import runs
from ira.runtime.store.database import Database
from ira.runtime.store.schema import decisions, outbox
from ira.triage.noise import NoiseState, NoNoiseState
from ira.triage.tables import alerts, incidents
from ira.triage.worker import TriageHandler
from tests.triage.builders import T0, TENANT

ENV = "prod"
META = RecordMeta(topic="ira.alerts.v1", partition=0, offset=0, key=None, headers={}, timestamp_ms=0)


def handler(clock: FrozenClock, settings: TriageSettings | None = None, noise: NoiseState | None = None, *,
            environment: str = ENV) -> TriageHandler:
    return TriageHandler(settings=settings or TriageSettings(), environment=environment, clock=clock,
                         noise=noise or NoNoiseState())


async def apply(db: Database, triage: TriageHandler, event: AlertEvent) -> Evaluation:
    """One event in its own transaction, retried on a lost compare-and-set like the consumer does."""
    for _ in range(20):
        try:
            async with db.transaction() as conn:
                evaluation = await triage.triage(conn, event)
                await triage.finish(conn)
                return evaluation
        except ConcurrentUpdateError:
            continue
    raise AssertionError("still conflicting after 20 tries")


async def apply_envelope(db: Database, triage: TriageHandler, envelope: Envelope) -> None:
    async with db.transaction() as conn:
        await triage(conn, envelope, META)
        await triage.finish(conn)


async def start_run(db: Database, incident_id: str, *, at=T0) -> str:
    """What the coordinator does on create_run: a run bound to the incident (C1)."""
    run_id = new_id("run")
    async with db.transaction() as conn:
        await runs.create_run(conn, NewRun(tenant_id=TENANT, run_id=run_id, task_id=new_id("task"),
                                           task_kind="diagnose", subject_ref=incident_id,
                                           workflow="incident-diagnosis@1", incident_id=incident_id), at=at)
    return run_id


async def incident_rows(db: Database) -> list[dict]:
    async with db.reader() as conn:
        rows = await conn.execute(select(incidents).order_by(incidents.c.opened_at, incidents.c.incident_id))
        return [dict(r._mapping) for r in rows]


async def alert_rows(db: Database) -> list[dict]:
    async with db.reader() as conn:
        return [dict(r._mapping) for r in await conn.execute(select(alerts))]


async def evaluations(db: Database) -> list[dict]:
    async with db.reader() as conn:
        return [dict(r._mapping) for r in await conn.execute(select(decisions))]


async def _outbox(db: Database) -> list[tuple[Envelope, str, str]]:
    async with db.reader() as conn:
        rows = await conn.execute(select(outbox.c.value, outbox.c.key, outbox.c.topic).order_by(outbox.c.id))
        return [(Envelope.from_bytes(row.value), row.key, row.topic) for row in rows]


async def published(db: Database) -> list[IncidentDecision]:
    """The run requests waiting in the outbox, in the order they will be published."""
    found = []
    for envelope, key, topic in await _outbox(db):
        if envelope.type != DECISION_MESSAGE:
            continue
        decision = IncidentDecision.model_validate(envelope.payload)
        assert topic.endswith("ira.incidents.v1") and decision.decision == "create_run", (decision.decision, topic)
        assert key == f"{decision.tenant_id}:{decision.incident_id}"
        assert envelope.message_id == decision.evaluation_id
        found.append(decision)
    return found


async def updates_sent(db: Database) -> list[IncidentUpdate]:
    """The incident updates waiting in the outbox: on their own topic (a storm of them never stands
    before a new run request), keyed by incident, identified by ``run_id:seq``."""
    found = []
    for envelope, key, topic in await _outbox(db):
        if envelope.type != UPDATE_MESSAGE:
            assert envelope.type == DECISION_MESSAGE, envelope.type
            continue
        update = IncidentUpdate.model_validate(envelope.payload)
        assert topic.endswith("ira.incident-updates.v1") and key == f"{update.tenant_id}:{update.incident_id}"
        assert envelope.message_id == update.update_id == f"{update.run_id}:{update.seq}"
        found.append(update)
    return found


def minutes(n: float) -> timedelta:
    return timedelta(minutes=n)
