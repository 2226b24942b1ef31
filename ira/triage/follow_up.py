"""What triage does with a follow-up to an active run: find the run's subscription, count the
follow-up's flip for the flapping rule, and fold a delivered one into the run's next update
(:mod:`ira.triage.coalesce`). The handler (:mod:`ira.triage.worker`) decides; this keeps the
subscription side of it in one place."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy.ext.asyncio import AsyncConnection

from ira.core.alert import AlertEvent, DecisionKind
from ira.runtime.settings.triage import TriageSettings
from ira.triage import subscription_store
from ira.triage.batch import Pending, RunRef, View
from ira.triage.coalesce import FollowUp, Subscription, counted, flips_with, fold, is_flip, subscribe
from ira.triage.decide import Decision, FollowUpFlips, Reason
from ira.triage.store import IncidentRecord


class FollowUps:
    """The subscription side of one triage handler."""

    def __init__(self, settings: TriageSettings) -> None:
        self._settings = settings

    async def subscription(self, conn: AsyncConnection, pending: Pending, alert: AlertEvent, view: View, *,
                           now: datetime) -> Subscription | None:
        """The subscription of the incident's active run (a new one if it has none stored yet)."""
        if view.incident is None or view.active_run_id is None:
            return None
        ref: RunRef = (alert.tenant_id, view.active_run_id)
        known, sub = pending.subscription(ref)
        if not known:  # not read by start(): a record applied on its own, or a caller without a consumer
            pending.remember_subscriptions({ref}, await subscription_store.read(conn, [ref]))
            _, sub = pending.subscription(ref)
        return sub or subscribe(ref[0], ref[1], view.incident.incident_id, severity=view.incident.severity,
                                firing_count=view.incident.firing_count, now=now)

    def flips(self, sub: Subscription, alert: AlertEvent, view: View, *, now: datetime) -> FollowUpFlips:
        """The run's follow-up flips in the flapping window, counting this one."""
        previous = view.alert.status if view.alert else None
        return flips_with(sub, flip=is_flip(previous, alert.status), now=now, window=self._settings.noise.window)

    def record(self, pending: Pending, sub: Subscription | None, follow_up: FollowUp, *, flips: FollowUpFlips | None,
               decision: Decision) -> dict[str, object] | None:
        """Fold a delivered follow-up into its run's subscription (a flapping one only counts its
        flip); returns the update it joins, for the evaluation's basis."""
        delivered = decision.decision == DecisionKind.DELIVER
        if sub is None or flips is None or not (delivered or decision.reason == Reason.FLAPPING):
            return None
        if delivered:
            sub = fold(sub, follow_up, interval=self._settings.update_interval, flips=flips)
        else:
            sub = counted(sub, flips, now=follow_up.at)
        pending.subscribed(sub)
        if not delivered:
            return None
        return {"seq": sub.seq + 1, "due_at": sub.due_at.isoformat() if sub.due_at else None}


def follow_up_of(alert: AlertEvent, view: View, record: IncidentRecord, *, evaluation_id: str, now: datetime,
                 traceparent: str | None) -> FollowUp:
    """``alert`` as a follow-up: its state before and after, and the incident as it left it."""
    return FollowUp(name=alert.name, status=alert.status, previous=view.alert.status if view.alert else None,
                    evaluation_id=evaluation_id, incident_version=record.version, firing_count=record.firing_count,
                    severity=record.severity, at=now, traceparent=traceparent)
