"""Triage's consumer handler: one alert event in, one evaluation out, in the consumer's transaction.

The ConsumerRunner hands a batch of envelopes to one transaction (which already holds their
inbox rows, the event-id dedupe). :meth:`TriageHandler.start` (the consumer's batch hook) reads,
for all of the batch's alerts in one statement, the group's open incident and the alert's
source identity (:func:`ira.triage.store.look_up`; a known identity is ``ignore/duplicate``,
the second dedupe). Then, for each ``alert.received`` envelope: decide (:mod:`ira.triage.decide`),
open or change the incident, and keep the alert row and the evaluation. A ``create_run`` also
keeps the outbox row of its ``incident.decision`` on ``ira.incidents.v1``. A ``deliver`` (a
follow-up to an active run) is folded into the run's subscription (:mod:`ira.triage.coalesce`)
instead of being sent on its own; the fold goes out as one ``incident.update`` on
``ira.incident-updates.v1`` when due, so a storm of follow-ups is a handful of updates and a new
incident's run request never waits behind them. Both are keyed ``tenant:incident_id``. Those
writes go to the database when the transaction's batch ends (:meth:`TriageHandler.finish`, the
other batch hook), in a few statements for the whole batch.
``change.recorded`` envelopes are stored for the investigators. Anything else is poison (DLQ).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TypeVar
from weakref import WeakKeyDictionary

from pydantic import BaseModel, ValidationError
from sqlalchemy.exc import InterfaceError, OperationalError
from sqlalchemy.ext.asyncio import AsyncConnection

from ira.core.alert import ALERT_MESSAGE, CHANGE_MESSAGE, AlertEvent, ChangeEvent, DecisionKind, Evaluation
from ira.core.clock import Clock
from ira.core.commit import OutboxMessage
from ira.core.decision import DECISION_MESSAGE, ROUTES, IncidentDecision
from ira.core.envelope import Envelope, topic_name
from ira.core.errors import InvalidMessageError, TransientError
from ira.core.grouping import group_key, group_labels
from ira.core.ids import new_id
from ira.runtime.bus.record import RecordMeta
from ira.runtime.pause import pause
from ira.runtime.settings.triage import TriageSettings
from ira.runtime.store.database import Database
from ira.triage import store, subscription_store
from ira.triage.batch import Pending, View
from ira.triage.coalesce import Subscription, update_message
from ira.triage.decide import (
    Case,
    Decision,
    Effect,
    IncidentState,
    NoiseVerdict,
    Policy,
    decide,
    duplicate,
    incident_effect,
    wants_noise,
)
from ira.triage.follow_up import FollowUps, follow_up_of
from ira.triage.incident import alert_state, changed, is_quiet_over, opened
from ira.triage.noise import NoiseState
from ira.triage.silence import find_silence
from ira.triage.store import IncidentRecord, LookupKey

log = logging.getLogger(__name__)
M = TypeVar("M", bound=BaseModel)


def parse_payload(model: type[M], envelope: Envelope) -> M:
    """The envelope's payload as ``model``; anything that does not validate is poison."""
    try:
        parsed = model.model_validate(envelope.payload)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "payload"
        raise InvalidMessageError(f"{envelope.type} payload {where}: {first['msg']}") from exc
    if getattr(parsed, "tenant_id", envelope.tenant_id) != envelope.tenant_id:
        raise InvalidMessageError(f"{envelope.type} payload tenant differs from the envelope's")
    return parsed


class TriageHandler:
    """The InboxHandler of the ``triage`` consumer, and its BatchHooks (:meth:`start`, :meth:`finish`;
    ``ReadFirst`` with :meth:`carry`: start and the handler only read, finish writes).

    One instance serves one consumer: it keeps each open transaction's pending writes (keyed
    weakly by the connection, so a rolled-back batch leaves nothing behind).
    """

    def __init__(self, *, settings: TriageSettings, environment: str, clock: Clock, noise: NoiseState) -> None:
        self._settings, self._clock, self._noise = settings, clock, noise
        self._policy = Policy(threshold=settings.severity_threshold, cooldown=settings.cooldown,
                              flapping_transitions=settings.noise.flapping_transitions)
        self._environment = environment
        self._follow_ups = FollowUps(settings)
        self._batches: WeakKeyDictionary[AsyncConnection, Pending] = WeakKeyDictionary()

    async def __call__(self, conn: AsyncConnection, envelope: Envelope, meta: RecordMeta) -> None:
        with store.conflicts_as_retries():
            if envelope.type == CHANGE_MESSAGE:  # written with the batch, by finish
                self._pending(conn).change(parse_payload(ChangeEvent, envelope))
            elif envelope.type == ALERT_MESSAGE:
                pending = self._pending(conn)
                alert = pending.alert(envelope) or parse_payload(AlertEvent, envelope)
                await self.triage(conn, alert, traceparent=envelope.traceparent, pending=pending)
            else:
                raise InvalidMessageError(f"triage cannot read envelope type {envelope.type!r}")

    async def start(self, conn: AsyncConnection, envelopes: Sequence[Envelope]) -> None:
        """Read what every alert of the transaction needs from the database, in one statement
        (the consumer calls it before the first record): a statement per event would make the
        database's round trip and planning, not the decisions, the limit of triage's rate."""
        pending = self._pending(conn)
        alerts: list[tuple[AlertEvent, str, dict[str, str]]] = []
        for envelope in envelopes:
            if envelope.type != ALERT_MESSAGE:
                continue
            try:
                alert = parse_payload(AlertEvent, envelope)
            except InvalidMessageError:
                continue  # refused by __call__ in its turn
            labels = self._labels(alert)
            alerts.append((alert, group_key(labels), labels))
        with store.conflicts_as_retries():
            lookups = await store.look_up(conn, [LookupKey.of(alert, key) for alert, key, _ in alerts])
        for (alert, key, labels), lookup in zip(alerts, lookups, strict=True):
            pending.read(alert, key, labels, lookup)
        groups = [(alert.tenant_id, key) for alert, key, _ in alerts]
        for group, verdict in (await self._noise.verdicts(groups)).items():  # one Redis read, not one per group
            pending.remember_noise(group, verdict)
        runs = {(alert.tenant_id, lookup.active_run_id) for (alert, _, _), lookup in zip(alerts, lookups, strict=True)
                if lookup.active_run_id}
        with store.conflicts_as_retries():
            pending.remember_subscriptions(runs, await subscription_store.read(conn, sorted(runs)))

    def carry(self, read: AsyncConnection, write: AsyncConnection) -> None:
        """The batch decided on ``read`` (a reader, before the write transaction: the consumer
        does that on SQLite, ``ira.runtime.bus.inbox``) is ``write``'s to flush. Nothing of it
        was written yet, and whatever it read is checked by the flush's compare-and-sets and
        unique keys, so it may land in a later transaction than the one it read in."""
        pending = self._batches.pop(read, None)
        if pending is not None:
            self._batches[write] = pending

    async def finish(self, conn: AsyncConnection) -> None:
        """Write what this transaction decided (the consumer calls it before committing)."""
        pending = self._batches.pop(conn, None)
        if pending is not None:
            with store.conflicts_as_retries():
                await pending.flush(conn, send=self._send)

    def _send(self, sub: Subscription, at: datetime) -> OutboxMessage:
        return update_message(sub, at, environment=self._environment)

    def _pending(self, conn: AsyncConnection) -> Pending:
        """The transaction's pending batch, begun if it has none yet. Looked up once per event and
        passed on: a look-up in the weak dictionary compares connections through SQLAlchemy's
        proxy ``__eq__`` (~1 us each, twice per event before, with a ``Pending`` built and dropped)."""
        pending = self._batches.get(conn)
        if pending is None:
            pending = self._batches[conn] = Pending()
        return pending

    async def triage(self, conn: AsyncConnection, alert: AlertEvent, *, traceparent: str | None = None,
                     pending: Pending | None = None) -> Evaluation:
        """Decide about ``alert``; its writes wait in the transaction's pending batch until :meth:`finish`
        (``pending``: that batch, when the caller has it already)."""
        pending = pending if pending is not None else self._pending(conn)
        grouped = await self._group(conn, pending, alert)
        if grouped.view.first_event_id is not None:
            return self._duplicate(pending, grouped)
        sub = await self._follow_ups.subscription(conn, pending, alert, grouped.view, now=grouped.now)
        case = await self._case(pending, grouped, sub)
        decision = decide(case, self._policy)
        evaluation_id = new_id("evl")
        record = self._apply(pending, grouped, case=case, decision=decision, evaluation_id=evaluation_id)
        folded = None
        if record is not None:
            folded = self._follow_ups.record(pending, sub, follow_up_of(
                alert, grouped.view, record, evaluation_id=evaluation_id, now=grouped.now, traceparent=traceparent),
                flips=case.flips, decision=decision)
        evaluation = _evaluation(grouped, decision, record, evaluation_id=evaluation_id, update=folded)
        message = None
        if decision.decision == DecisionKind.CREATE_RUN and record is not None:
            message = self._message(grouped, evaluation, record, traceparent=traceparent)
        counted = incident_effect(case, decision) in (Effect.OPEN, Effect.JOIN)
        pending.event(alert, store.alert_row(alert, group_key=grouped.group_key,
                                             incident_id=record.incident_id if record else None),
                      evaluation, state=alert_state(alert, case.state_at) if counted else None, outbox=message)
        return evaluation

    async def _group(self, conn: AsyncConnection, pending: Pending, alert: AlertEvent) -> Grouped:
        now = self._clock.now()
        found = pending.group(alert)  # computed by start() for the alert it parsed
        if found is not None:
            key, labels = found
        else:
            labels = self._labels(alert)
            key = group_key(labels)
        lookup = pending.lookup(alert, key)
        if lookup is None:  # not read by start(): a record applied on its own, or a caller without a consumer
            lookup = (await store.look_up(conn, [LookupKey.of(alert, key)]))[0]
        view = pending.view(alert, key, lookup)
        if view.incident is not None and is_quiet_over(view.incident, now):
            pending.close(view.incident, now)
            view = pending.view(alert, key, lookup)
        return Grouped(alert=alert, group_key=key, labels=labels, now=now, view=view)

    def _labels(self, alert: AlertEvent) -> dict[str, str]:
        """The labels ``alert`` is grouped by (its tenant's ``group_by``)."""
        return group_labels(alert, self._settings.group_by_for(alert.tenant_id))

    async def _case(self, pending: Pending, grouped: Grouped, sub: Subscription | None) -> Case:
        alert, view = grouped.alert, grouped.view
        silence = find_silence(self._settings.silences, alert, grouped.now)
        incident = None
        if view.incident is not None:
            incident = IncidentState(incident_id=view.incident.incident_id, version=view.incident.version,
                                     firing_count=view.incident.firing_count, alert=view.alert,
                                     active_run_id=view.active_run_id)
        silence_id = silence.id if silence else None
        flips = self._follow_ups.flips(sub, alert, view, now=grouped.now) if sub is not None else None
        noise = None
        if wants_noise(alert.status, silence_id, incident):
            noise = await self._verdict(pending, alert.tenant_id, grouped.group_key)
        return Case(status=alert.status, severity=alert.severity, state_at=store.state_at(alert), now=grouped.now,
                    incident=incident, last_run_at=view.last_run_at, silence_id=silence_id, noise=noise, flips=flips)

    async def _verdict(self, pending: Pending, tenant_id: str, key: str) -> NoiseVerdict | None:
        """The group's noise verdict, read once per batch (it is advisory and changes slowly)."""
        known, verdict = pending.noise((tenant_id, key))
        if not known:
            verdict = await self._noise.verdict(tenant_id, key)
            pending.remember_noise((tenant_id, key), verdict)
        return verdict

    def _apply(
        self, pending: Pending, grouped: Grouped, *, case: Case, decision: Decision, evaluation_id: str
    ) -> IncidentRecord | None:
        """The incident after this event (None if the event is in no incident)."""
        effect, current = incident_effect(case, decision), grouped.view.incident
        run_evaluation_id = evaluation_id if decision.decision == DecisionKind.CREATE_RUN else None
        if effect == Effect.NONE:
            return None
        if effect == Effect.LINK:
            return current
        if current is None:
            record = opened(grouped.alert, incident_id=new_id("inc"), group_key=grouped.group_key,
                            labels=grouped.labels, now=grouped.now, last_run_at=grouped.view.last_run_at,
                            run_evaluation_id=run_evaluation_id)
            pending.opened(record)
            return record
        record = changed(current, grouped.alert, previous=grouped.view.alert, now=grouped.now,
                         quiet_period=self._settings.quiet_period, run_evaluation_id=run_evaluation_id)
        pending.changed(current, record)
        return record

    def _duplicate(self, pending: Pending, grouped: Grouped) -> Evaluation:
        view = grouped.view
        decision = duplicate(view.first_event_id or "")
        evaluation = Evaluation(
            evaluation_id=new_id("evl"), tenant_id=grouped.alert.tenant_id, event_id=grouped.alert.event_id,
            incident_id=view.first_incident_id, decision=decision.decision, reason=decision.reason,
            basis={**decision.basis, "group_key": grouped.group_key}, at=grouped.now)
        pending.duplicate(evaluation)
        return evaluation

    def _message(
        self, grouped: Grouped, evaluation: Evaluation, record: IncidentRecord, *, traceparent: str | None
    ) -> OutboxMessage:
        alert = grouped.alert
        payload = IncidentDecision(
            evaluation_id=evaluation.evaluation_id, decision=evaluation.decision, tenant_id=alert.tenant_id,
            incident_id=record.incident_id, incident_version=record.version, group_key=grouped.group_key,
            service=record.service, environment=record.environment, severity=record.severity, title=record.title,
            alert=alert, opened_at=record.opened_at, reason=evaluation.reason, basis=evaluation.basis)
        envelope = Envelope(message_id=evaluation.evaluation_id, type=DECISION_MESSAGE, tenant_id=alert.tenant_id,
                            occurred_at=grouped.now, traceparent=traceparent, payload=payload.model_dump(mode="json"))
        route = ROUTES[evaluation.decision]
        return OutboxMessage(topic=topic_name(route.topic, self._environment),
                             key=f"{alert.tenant_id}:{record.incident_id}", envelope=envelope, awaits=route.inbox)


@dataclass(frozen=True, slots=True)
class Grouped:
    """An alert with its group and the group as this batch sees it (internal: a dataclass)."""

    alert: AlertEvent
    group_key: str
    labels: dict[str, str]
    now: datetime
    view: View


def _evaluation(grouped: Grouped, decision: Decision, record: IncidentRecord | None, *,
                evaluation_id: str, update: dict[str, object] | None = None) -> Evaluation:
    """The stored evaluation: the rule's own basis plus the facts every decision rests on (and, for
    a delivered follow-up, the run's update it was folded into: its seq and when it is due)."""
    alert = grouped.alert
    basis: dict[str, object] = {
        **decision.basis, "group_key": grouped.group_key, "fingerprint": alert.fingerprint,
        "status": alert.status.value, "severity": alert.severity.value,
        "incident_version": record.version if record else None,
    }
    if update is not None:
        basis["update"] = update
    return Evaluation(evaluation_id=evaluation_id, tenant_id=alert.tenant_id, event_id=alert.event_id,
                      incident_id=record.incident_id if record else None, decision=decision.decision,
                      reason=decision.reason, basis=basis, at=grouped.now)


async def close_quiet_incidents(db: Database, clock: Clock, *, settings: TriageSettings, stop: asyncio.Event) -> None:
    """Every ``close_interval``, close incidents whose quiet period passed (lookups also do it lazily)."""
    while not stop.is_set():
        try:
            async with db.transaction() as conn:
                closed = await store.close_quiet_incidents(conn, now=clock.now())
            if closed:
                log.info("triage: closed %d quiet incident(s)", closed)
        except (TransientError, OperationalError, InterfaceError) as exc:  # the database is busy or away
            log.warning("triage: closing quiet incidents failed, trying again later: %s", exc)
        await pause(stop, settings.close_interval.total_seconds())
