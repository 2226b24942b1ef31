"""Incident updates in (``ira.incident-updates.v1``): one event on the run's log per update.

Triage folds a run's follow-up alerts into coalesced updates (:mod:`ira.core.decision`), so
this runs once per *update*, in the ``coordinator-updates`` consumer's transaction with its
inbox row (an update re-published under its id ``run_id:seq`` is applied once). Each appends
one ``INCIDENT_UPDATED`` event; only a change of the draft's substance
(:mod:`ira.coordinator.substance`) moves the incident version the run's approval binds to, and
revises a draft waiting for approval, which asks for the approval again. A ``deliver``
decision of an older triage (one alert, ``incident.decision``) is applied as a one-alert update
(:func:`from_decision`).
"""

from __future__ import annotations

import logging
from datetime import datetime

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncConnection

from ira.coordinator import gate
from ira.coordinator.config import WorkflowConfig
from ira.coordinator.facts import incident_version, lock_run
from ira.coordinator.messages import parse_message
from ira.coordinator.substance import Substance, after, initial, notes
from ira.core.alert import AlertStatus, Severity
from ira.core.commit import EventDraft
from ira.core.decision import (
    UPDATE_MESSAGE,
    IncidentChanges,
    IncidentDecision,
    IncidentUpdate,
    UpdateTrigger,
)
from ira.core.envelope import Envelope
from ira.core.errors import NotFoundError
from ira.core.events import RunEventType
from ira.core.run import Run
from ira.core.states import TERMINAL_RUN_STATES
from ira.runtime import runtrace
from ira.runtime.store import runs
from ira.runtime.store.schema import events

log = logging.getLogger(__name__)
INCIDENT_UPDATED = RunEventType.INCIDENT_UPDATED


def parse_update(envelope: Envelope) -> IncidentUpdate:
    """The envelope's update, or InvalidMessageError (poison: it goes to the DLQ)."""
    return parse_message(envelope, IncidentUpdate, message_type=UPDATE_MESSAGE, what="update",
                         topic="incident updates")


def from_decision(decision: IncidentDecision, *, run_id: str) -> IncidentUpdate:
    """One ``deliver`` decision of an older triage (one alert, before coalescing) as an update."""
    resolved = decision.alert.status == AlertStatus.RESOLVED
    changes = IncidentChanges(events=1, resolved=int(resolved), names_joined=(decision.alert.name,),
                              first_seen=decision.alert.received_at, last_seen=decision.alert.received_at,
                              incident_version=decision.incident_version, firing_count=int(not resolved),
                              severity=Severity(decision.severity), last_evaluation_id=decision.evaluation_id)
    return IncidentUpdate(update_id=decision.evaluation_id, tenant_id=decision.tenant_id,
                          incident_id=decision.incident_id, run_id=run_id, seq=0, trigger=UpdateTrigger.INTERVAL,
                          changes=changes)


async def apply_update(conn: AsyncConnection, update: IncidentUpdate, *, config: WorkflowConfig,
                       at: datetime) -> Run | None:
    """Record ``update`` on its run's log (None if the run ended or does not exist)."""
    try:
        run = await lock_run(conn, update.tenant_id, update.run_id)
    except NotFoundError:
        log.warning("update %s: run %s not found", update.update_id, update.run_id)
        return None
    if run.state in TERMINAL_RUN_STATES:
        log.info("update %s: run %s already %s", update.update_id, run.run_id, run.state.value)
        return None
    # the run's trace gets a span per update (the alerts' own requests stay their own traces)
    with runtrace.run_span("incident update", run.traceparent, attributes={
            "ira.run_id": run.run_id, "ira.incident_id": update.incident_id, "ira.update.seq": update.seq,
            "ira.update.trigger": update.trigger.value, "ira.update.events": update.changes.events,
            "ira.incident_version": update.changes.incident_version}):
        return await _apply(conn, run, update, config=config, at=at)


async def _apply(conn: AsyncConnection, run: Run, update: IncidentUpdate, *, config: WorkflowConfig,
                 at: datetime) -> Run:
    before = await substance_of(conn, run)
    now = after(before, update.changes)
    known = await incident_version(conn, run)
    substantive = now != before and update.changes.incident_version > known
    await runs.append_events(conn, run.tenant_id, run.run_id, [EventDraft(type=INCIDENT_UPDATED, data={
        "update_id": update.update_id, "seq": update.seq, "trigger": update.trigger.value,
        **update.changes.model_dump(mode="json"), "all_resolved": update.all_resolved,
        "substantive": substantive, "substance": now.model_dump(mode="json")})], at=at)
    run = await lock_run(conn, run.tenant_id, run.run_id)
    if substantive:
        edit = {"severity": now.severity.value} if now.severity != before.severity else None
        await gate.revise(conn, run, reason="resource_changed", config=config, at=at,
                          new_version=update.changes.incident_version, edit=edit, note="; ".join(notes(before, now)))
    return run


async def substance_of(conn: AsyncConnection, run: Run) -> Substance:
    """The incident as the run's draft states it: as accepted, then per substantive update."""
    rows = await conn.execute(select(events.c.data).where(
        events.c.tenant_id == run.tenant_id, events.c.run_id == run.run_id, events.c.type == INCIDENT_UPDATED)
        .order_by(events.c.run_seq.desc()).limit(1))
    last = rows.first()
    return Substance.model_validate(last.data["substance"]) if last else initial(run.bindings)
