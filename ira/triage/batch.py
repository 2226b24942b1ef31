"""One transaction's worth of triage: decisions made event by event, written once at the end.

The consumer applies a batch of events in one transaction. The batch reads the database once,
before its first event (:func:`ira.triage.store.look_up` for all of them, kept by
:meth:`Pending.read`); what each event changes is kept here, so the next event of the same
batch sees the incident, the alert states and the source identities as this batch left them
(:meth:`Pending.view`), and the writes go out in a few statements when the batch ends
(:meth:`Pending.flush`, from the handler's ``finish`` batch hook). If the flush loses a race
the whole transaction rolls back and the consumer retries the events one by one.

The subscriptions of the batch's active runs (:mod:`ira.triage.coalesce`) are read once too
(:meth:`Pending.remember_subscriptions`), folded into event by event, and written at the
flush, which also sends every fold that is due by then (the update and the cleared fold in
this transaction).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy.ext.asyncio import AsyncConnection

from ira.core.alert import AlertEvent, ChangeEvent, Evaluation
from ira.core.commit import OutboxMessage
from ira.core.envelope import Envelope
from ira.runtime.store.outbox import enqueue
from ira.triage import store, subscription_store
from ira.triage.coalesce import Subscription, is_due, sent
from ira.triage.decide import AlertState, NoiseVerdict
from ira.triage.incident import closed
from ira.triage.store import IncidentRecord, Lookup, evaluation_row

GroupRef = tuple[str, str]
"""(tenant_id, group_key)"""
IncidentRef = tuple[str, str]
"""(tenant_id, incident_id)"""
RunRef = subscription_store.RunRef


@dataclass(frozen=True, slots=True)
class View:
    """An alert's group as its decision sees it: this batch's changes over the database's state."""

    incident: IncidentRecord | None
    alert: AlertState | None
    active_run_id: str | None
    first_event_id: str | None
    first_incident_id: str | None
    last_run_at: datetime | None


def _later(a: datetime | None, b: datetime | None) -> datetime | None:
    return max(a, b) if a and b else a or b


class Pending:
    """The unit of work of one transaction."""

    def __init__(self) -> None:
        self._open: dict[GroupRef, IncidentRecord | None] = {}
        """The group's open incident as this batch left it (None: the batch closed it)."""
        self._records: dict[IncidentRef, IncidentRecord] = {}
        self._read_versions: dict[IncidentRef, int] = {}
        """Version read from the database, per changed incident: the compare-and-set's expectation."""
        self._new: set[IncidentRef] = set()
        self._states: dict[tuple[str, str, str], AlertState] = {}
        self._identities: dict[tuple[str, str, str], tuple[str, str | None]] = {}
        self._group_runs: dict[GroupRef, datetime] = {}
        self._alert_rows: list[dict[str, Any]] = []
        self._evaluation_rows: list[dict[str, Any]] = []
        self._outbox: list[OutboxMessage] = []
        self._changes: list[dict[str, Any]] = []
        self._last_at: datetime | None = None
        self._noise: dict[GroupRef, NoiseVerdict | None] = {}
        self._reads: dict[tuple[str, str], tuple[AlertEvent, str, dict[str, str], Lookup]] = {}
        """What :meth:`read` was given, by (tenant_id, event_id): the alert, its group key and
        labels, the database's answer."""
        self._subs: dict[RunRef, Subscription | None] = {}
        """Each known run's subscription as this batch left it (None: the database holds none)."""
        self._sub_versions: dict[RunRef, int] = {}
        """The version read per stored subscription: the compare-and-set's expectation."""
        self._subs_changed: set[RunRef] = set()

    def read(self, alert: AlertEvent, group_key: str, labels: dict[str, str], lookup: Lookup) -> None:
        """Keep what the database said about ``alert`` before this batch changed anything (and
        the group ``start`` computed for it: the decision does not compute it again)."""
        self._reads[(alert.tenant_id, alert.event_id)] = (alert, group_key, labels, lookup)

    def group(self, alert: AlertEvent) -> tuple[str, dict[str, str]] | None:
        """The group key and labels :meth:`read` was given for ``alert`` (the same object)."""
        found = self._reads.get((alert.tenant_id, alert.event_id))
        return (found[1], found[2]) if found is not None and found[0] is alert else None

    def alert(self, envelope: Envelope) -> AlertEvent | None:
        """The alert :meth:`read` parsed from ``envelope`` (saves parsing it twice)."""
        found = self._reads.get((envelope.tenant_id, envelope.message_id))
        return found[0] if found else None

    def lookup(self, alert: AlertEvent, group_key: str) -> Lookup | None:
        """What the database says about ``alert``'s group and identity, if this batch knows it
        without asking: read up front, or the group's incident is one this batch opened."""
        found = self._reads.get((alert.tenant_id, alert.event_id))
        if found is not None and found[1] == group_key:
            return found[3]
        return self.known(alert, group_key)

    def known(self, alert: AlertEvent, group_key: str) -> Lookup | None:
        """What the database would say, when this batch already knows it: the group's incident
        was opened by this batch, so the database holds no state, run or cooldown for it.

        The source identity is then checked by the alerts table's unique constraint at the
        flush instead of by a read; a duplicate (rare: sources dedupe at the edge) fails the
        flush, and the consumer re-applies the batch's events one by one, each with its read.
        """
        incident = self._open.get((alert.tenant_id, group_key))
        if incident is None or (incident.tenant_id, incident.incident_id) not in self._new:
            return None
        return Lookup(incident=incident, alert=None, active_run_id=None, first_event_id=None,
                      first_incident_id=None, group_last_run_at=None)

    def noise(self, group: GroupRef) -> tuple[bool, NoiseVerdict | None]:
        """The group's noise verdict if this batch read it already: ``(known, verdict)``."""
        return group in self._noise, self._noise.get(group)

    def remember_noise(self, group: GroupRef, verdict: NoiseVerdict | None) -> None:
        self._noise[group] = verdict

    def remember_subscriptions(self, refs: set[RunRef], found: Mapping[RunRef, Subscription]) -> None:
        """What the database holds for ``refs`` (read once for the batch, or once for an event)."""
        for ref in refs:
            sub = found.get(ref)
            self._subs[ref] = sub
            if sub is not None:
                self._sub_versions[ref] = sub.version

    def subscription(self, ref: RunRef) -> tuple[bool, Subscription | None]:
        """The run's subscription if this batch knows it: ``(known, subscription)``."""
        return ref in self._subs, self._subs.get(ref)

    def subscribed(self, sub: Subscription) -> None:
        """Keep ``sub`` as changed by this batch (written at the flush)."""
        ref = (sub.tenant_id, sub.run_id)
        self._subs[ref] = sub
        self._subs_changed.add(ref)

    def view(self, alert: AlertEvent, group_key: str, lookup: Lookup) -> View:
        group = (alert.tenant_id, group_key)
        incident = self._open.get(group, lookup.incident)  # a stored None: this batch closed it
        same_as_read = incident is not None and lookup.incident is not None and (
            incident.incident_id == lookup.incident.incident_id)
        state = None
        if incident is not None:
            state = self._states.get((alert.tenant_id, incident.incident_id, alert.fingerprint))
            state = state or (lookup.alert if same_as_read else None)
        first = self._identities.get((alert.tenant_id, alert.source_id, alert.source_event_id))
        first_event_id, first_incident_id = first or (lookup.first_event_id, lookup.first_incident_id)
        last_run = incident.last_run_at if incident else _later(lookup.group_last_run_at, self._group_runs.get(group))
        return View(incident=incident, alert=state, active_run_id=lookup.active_run_id if same_as_read else None,
                    first_event_id=first_event_id, first_incident_id=first_incident_id, last_run_at=last_run)

    def opened(self, record: IncidentRecord) -> None:
        ref = (record.tenant_id, record.incident_id)
        self._new.add(ref)
        self._store(record)

    def changed(self, before: IncidentRecord, after: IncidentRecord) -> None:
        ref = (before.tenant_id, before.incident_id)
        if ref not in self._new:
            self._read_versions.setdefault(ref, before.version)
        self._store(after)

    def close(self, record: IncidentRecord, now: datetime) -> None:
        self.changed(record, closed(record, now))

    def _store(self, record: IncidentRecord) -> None:
        group = (record.tenant_id, record.group_key)
        self._records[(record.tenant_id, record.incident_id)] = record
        self._open[group] = None if record.closed_at else record
        if record.last_run_at:
            self._group_runs[group] = _later(self._group_runs.get(group), record.last_run_at)  # type: ignore[assignment]

    def event(self, alert: AlertEvent, row: dict[str, Any], evaluation: Evaluation, *,
              state: AlertState | None, outbox: OutboxMessage | None) -> None:
        """Record one applied event: its alert row, evaluation, new alert state and message."""
        self._alert_rows.append(row)
        self._evaluation_rows.append(evaluation_row(evaluation))
        self._identities[(alert.tenant_id, alert.source_id, alert.source_event_id)] = (
            alert.event_id, row["incident_id"])
        if state is not None and row["incident_id"]:
            self._states[(alert.tenant_id, row["incident_id"], alert.fingerprint)] = state
        if outbox is not None:
            self._outbox.append(outbox)
        self._last_at = evaluation.at

    def change(self, change: ChangeEvent) -> None:
        """A deploy or config change to store (a known source identity is skipped at the flush)."""
        self._changes.append(change.model_dump())

    def duplicate(self, evaluation: Evaluation) -> None:
        """A known source identity: only its evaluation is stored."""
        self._evaluation_rows.append(evaluation_row(evaluation))
        self._last_at = evaluation.at

    async def flush(self, conn: AsyncConnection, *, send: Callable[[Subscription, datetime], OutboxMessage]) -> None:
        """Write the batch: incidents first (so a lost race surfaces before anything else), then the rest.

        Changes before inserts: an incident this batch closed must be closed before the group's
        next one can be the open one. ``send`` makes the message of a subscription's due update.
        """
        await store.update_incidents(conn, [(self._records[ref], self._read_versions[ref])  # a fixed order keeps
                                            for ref in sorted(self._read_versions)])  # two workers from deadlocking
        await store.insert_incidents(conn, [self._records[ref] for ref in sorted(self._new)])
        await store.insert_alerts(conn, self._alert_rows)
        await store.insert_evaluations(conn, self._evaluation_rows)
        await store.insert_changes(conn, self._changes)
        if self._last_at is not None:
            await subscription_store.write(conn, self._subscriptions(send, now=self._last_at))
        if self._outbox and self._last_at is not None:
            await enqueue(conn, self._outbox, at=self._last_at)

    def _subscriptions(self, send: Callable[[Subscription, datetime], OutboxMessage], *,
                       now: datetime) -> list[tuple[Subscription, int]]:
        """The changed subscriptions to write, each due fold sent (its message joins the outbox)."""
        written = []
        for ref in sorted(self._subs_changed):
            sub = self._subs[ref]
            assert sub is not None
            if is_due(sub, now):
                self._outbox.append(send(sub, now))
                sub = sent(sub, now=now)
            written.append((sub, self._sub_versions.get(ref, 0)))
        return written
