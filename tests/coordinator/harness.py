"""Building blocks for coordinator tests: decisions, an in-process pump, the API client.

The pump replaces relay + broker for store-level tests: it takes the outbox rows the store
committed (claim + mark sent, the relay's own calls) and hands each to the component that
consumes its topic, so a whole run can be driven deterministically on SQLite and PostgreSQL.
The walk tests in test_walk.py use the real broker instead.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

import httpx
from sqlalchemy import select

from ira.connectors.tickets.builtin import BuiltinTicketSystem
from ira.coordinator.api import build_router
from ira.coordinator.config import WorkflowConfig
from ira.coordinator.deps import Deps
from ira.coordinator.handlers import step_handlers
from ira.coordinator.intake import apply_decision, parse_decision
from ira.coordinator.timeouts import handle_timer
from ira.coordinator.updates import apply_update, parse_update
from ira.core.alert import AlertEvent, AlertStatus, DecisionKind, Severity, SourceKind
from ira.core.budget import BudgetDimension
from ira.core.clock import Clock, FrozenClock
from ira.core.decision import (
    DECISION_MESSAGE,
    UPDATE_MESSAGE,
    UPDATES_INBOX,
    IncidentChanges,
    IncidentDecision,
    IncidentUpdate,
    UpdateTrigger,
    update_id,
)
from ira.core.envelope import Envelope
from ira.core.ids import new_event_id, new_id
from ira.core.ports import TicketSystem
from ira.core.run import Run
from ira.dashboard.api import build_read_api
from ira.runtime.bus.inbox import record_inbox_many
from ira.runtime.dispatch import StepContext, StepDispatcher
from ira.runtime.http import create_app
from ira.runtime.settings import Settings
from ira.runtime.store import outbox
from ira.runtime.store.database import Database
from ira.runtime.store.rows import run_from_row
from ira.runtime.store.schema import runs as runs_table
from ira.runtime.telemetry import Metrics
from ira.runtime.wakeup import STEP_READY, TIMER_FIRED
from tests.coordinator.scripted import ScriptedInvestigators

T0 = datetime(2026, 4, 29, 10, 40, tzinfo=UTC)
TOKENS = {"admin": "acme-admin-token", "viewer": "acme-viewer-token", "lead": "acme-lead-token",
          "other": "globex-admin-token", "bot": "acme-bot-token"}


def api_settings() -> Settings:
    return Settings.model_validate({"database_url": "sqlite:///unused.db", "tenant": "acme", "api_tokens": [
        {"token": TOKENS["admin"], "principal": "admin", "roles": ["admin"]},
        {"token": TOKENS["viewer"], "principal": "viewer", "roles": ["viewer"]},
        {"token": TOKENS["lead"], "principal": "lead", "roles": ["approver"]},
        {"token": TOKENS["bot"], "principal": "bot", "roles": ["viewer"]},
        {"token": TOKENS["other"], "principal": "globex-admin", "roles": ["admin"], "tenant": "globex"}]})


def config(environment: str = "prod", **overrides: object) -> WorkflowConfig:
    base = {"environment": environment, "root_budget": {BudgetDimension.STEPS: 40, BudgetDimension.TOOL_CALLS: 40},
            "branch_budget": {BudgetDimension.STEPS: 5, BudgetDimension.TOOL_CALLS: 5}}
    return WorkflowConfig(**{**base, **overrides})  # type: ignore[arg-type]


KNOWN_ALERT = "OrderLatencyHigh"
"""The alert :func:`decision`'s runs are accepted for."""


def decision(tenant: str = "acme", incident_id: str | None = None, *, version: int = 1,
             kind: DecisionKind = DecisionKind.CREATE_RUN, at: datetime = T0,
             status: AlertStatus = AlertStatus.FIRING) -> IncidentDecision:
    incident_id = incident_id or new_id("inc")
    alert = AlertEvent(
        event_id=new_event_id(), tenant_id=tenant, source_id="am", source_kind=SourceKind.ALERTMANAGER,
        source_event_id=new_id("src"), fingerprint="fp-order-latency", status=status, name=KNOWN_ALERT,
        severity=Severity.CRITICAL, labels={"service": "order-service", "env": "prod"},
        starts_at=at - timedelta(minutes=5), received_at=at, environment="prod", service="order-service")
    return IncidentDecision(
        evaluation_id=new_id("evl"), decision=kind, tenant_id=tenant, incident_id=incident_id,
        incident_version=version, group_key="order-service", service="order-service", environment="prod",
        severity="critical", title="order-service p99 latency above 2s", alert=alert, opened_at=at,
        reason="new incident" if kind == DecisionKind.CREATE_RUN else "firing again")


def incident_update(run_id: str, incident_id: str, seq: int, *, version: int, names: tuple[str, ...] = (KNOWN_ALERT,),
                    severity: Severity = Severity.CRITICAL, firing: int = 1,
                    trigger: UpdateTrigger = UpdateTrigger.INTERVAL, tenant: str = "acme") -> Envelope:
    """Triage's coalesced update ``seq`` to ``run_id`` (three alert events folded, ``names`` joined)."""
    changes = IncidentChanges(events=3, joined=len(names), names_joined=names, first_seen=T0, last_seen=T0,
                              incident_version=version, firing_count=firing, severity=severity)
    body = IncidentUpdate(update_id=update_id(run_id, seq), tenant_id=tenant, incident_id=incident_id, run_id=run_id,
                          seq=seq, trigger=trigger, changes=changes)
    return Envelope(message_id=body.update_id, type=UPDATE_MESSAGE, tenant_id=tenant, occurred_at=T0,
                    payload=body.model_dump(mode="json"))


def envelope(d: IncidentDecision, at: datetime = T0) -> Envelope:
    return Envelope(message_id=new_event_id(), type=DECISION_MESSAGE, tenant_id=d.tenant_id, occurred_at=at,
                    payload=d.model_dump(mode="json"))


@dataclass
class Pump:
    """Delivers committed outbox rows in-process: decisions, wake-ups, timers; deliveries kept."""

    db: Database
    deps: Deps
    dispatchers: Sequence[StepDispatcher]
    scripted: ScriptedInvestigators | None = None
    deliveries: list[Envelope] = field(default_factory=list)
    tasks: set[asyncio.Task[None]] = field(default_factory=set)
    held: set[str] = field(default_factory=set)
    """Step kinds whose wake-ups are parked (to stop a run between two steps)."""
    parked: list[Envelope] = field(default_factory=list)
    _ids = itertools.count()

    async def drain(self, *, timeout: float = 20) -> None:
        """Until no row is unsent and every handler finished (or hangs on purpose)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while loop.time() < deadline:
            # the handlers still running *before* the batch: one that finishes while the batch
            # reads the outbox may have committed a wake-up the batch did not see
            running = [t for t in self.tasks if not t.done()]
            if await self._deliver_batch():
                continue
            hanging = len(self.scripted.hanging) if self.scripted else 0
            if len(running) <= hanging:
                return
            await asyncio.wait(running, timeout=0.05)
        raise AssertionError("pump did not settle")

    async def _deliver_batch(self) -> bool:
        async with self.db.transaction() as conn:
            rows = await outbox.claim_batch(conn, relay_id="pump", now=datetime.now(UTC), lease=timedelta(minutes=5),
                                            limit=200)
            await outbox.mark_sent(conn, relay_id="pump", ids=[r.id for r in rows], at=datetime.now(UTC))
        for row in rows:
            await self._deliver(row.topic, Envelope.from_bytes(row.value))
        return bool(rows)

    async def _deliver(self, topic: str, env: Envelope) -> None:
        if topic.endswith("ira.incident-updates.v1") and env.type == UPDATE_MESSAGE:
            await self.update(env)
        elif topic.endswith(("ira.incidents.v1", "ira.incident-updates.v1")):
            await self.decide(env)
        elif env.type == TIMER_FIRED:
            await handle_timer(self.deps, env)
        elif env.type == STEP_READY and env.payload["kind"] in self.held:
            self.parked.append(env)
        elif env.type == STEP_READY:
            for dispatcher in self.dispatchers:
                task = asyncio.create_task(dispatcher.handle_wakeup(env))
                self.tasks.add(task)
        elif topic.endswith("ira.deliveries.v1"):
            self.deliveries.append(env)

    async def release(self) -> None:
        """Let parked wake-ups through, then settle."""
        self.held.clear()
        for env in self.parked:
            for dispatcher in self.dispatchers:
                self.tasks.add(asyncio.create_task(dispatcher.handle_wakeup(env)))
        self.parked.clear()
        await self.drain()

    async def claim_parked(self) -> StepContext:
        """Claim the one parked wake-up with the coordinator's dispatcher without running it (a
        test moves the run in between, then ``dispatchers[0].run_claimed``); nothing is held after."""
        [wakeup] = self.parked
        async with self.db.transaction() as conn:
            ctx = await self.dispatchers[0].claim_in(conn, wakeup)
        assert ctx is not None
        self.parked.clear()
        self.held.clear()
        return ctx

    async def decide(self, env: Envelope) -> None:
        """What the coordinator's decisions consumer does: inbox row + decision, one transaction."""
        async with self.db.transaction() as conn:
            fresh = await record_inbox_many(conn, consumer="coordinator", keys=[(env.tenant_id, env.message_id)],
                                            at=self.deps.clock.now())
            if fresh:
                await apply_decision(conn, parse_decision(env), config=self.deps.config, at=self.deps.clock.now())

    async def update(self, env: Envelope) -> bool:
        """What the coordinator's updates consumer does: inbox row + update, one transaction;
        False when its inbox already held the update (a re-delivery)."""
        async with self.db.transaction() as conn:
            fresh = await record_inbox_many(conn, consumer=UPDATES_INBOX, keys=[(env.tenant_id, env.message_id)],
                                            at=self.deps.clock.now())
            if fresh:
                await apply_update(conn, parse_update(env), config=self.deps.config, at=self.deps.clock.now())
        return bool(fresh)

    async def close(self) -> None:
        if self.scripted:
            self.scripted.release.set()
        for task in self.tasks:
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)


def build(db: Database, *, clock: Clock | None = None, tickets: TicketSystem | None = None,
          behaviour: dict[str, str] | None = None, lease: float = 30, sandbox: TicketSystem | None = None,
          **cfg: object) -> tuple[Pump, Deps]:
    clock = clock or FrozenClock(T0)
    deps = Deps(db=db, clock=clock, config=config(**cfg), tickets=tickets or BuiltinTicketSystem(db, clock),
                sandbox_tickets=sandbox)
    scripted = ScriptedInvestigators(db, clock, behaviour=behaviour or {})
    coordinator = StepDispatcher(db=db, clock=clock, handlers=step_handlers(deps), owner="coordinator-test",
                                 lease=timedelta(seconds=lease))
    return Pump(db, deps, [coordinator, scripted.dispatcher(lease_seconds=lease)], scripted=scripted), deps


@asynccontextmanager
async def api(deps: Deps, *, settings: Settings | None = None) -> AsyncIterator[httpx.AsyncClient]:
    settings = settings or api_settings()
    app = create_app(metrics=Metrics(), routers=[build_router(settings, deps), build_read_api(settings, deps.db)])
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://ira") as client:
        yield client


def auth(who: str) -> dict[str, str]:
    return {"authorization": f"Bearer {TOKENS[who]}"}


async def run_for_incident(db: Database, incident_id: str, tenant: str = "acme") -> Run | None:
    """The incident's newest run, whatever its state."""
    async with db.reader() as conn:
        row = (await conn.execute(select(runs_table).where(
            runs_table.c.tenant_id == tenant, runs_table.c.incident_id == incident_id)
            .order_by(runs_table.c.created_at.desc()).limit(1))).first()
    return run_from_row(row) if row else None
