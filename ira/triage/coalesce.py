"""Coalesced delivery: follow-ups to an active run folded into incident updates. Pure functions.

A storm of follow-ups must not become a storm of run events, draft revisions and approval
requests, so a follow-up is not sent on its own: it is folded into its run's
:class:`Subscription` (joined, resolved and re-fired alerts, counts, first/last seen, the
incident's version, firing count and severity after it), and the fold goes out as one
:class:`~ira.core.decision.IncidentUpdate`

* at once when it is the first follow-up after a quiet ``interval`` (nothing waits, none sent
  for that long), when the incident became all resolved, or when its severity rose above what
  the run was last told (:func:`urgency`);
* otherwise when ``interval`` has passed since the last update (``due_at``), whichever comes
  first: the consumer sends a due fold in the batch that folds into it, a sweeper sends the
  folds that became due without another follow-up.

Why fold in triage and keep the fold in SQL: triage already reads and writes the incident
in the follow-up's transaction, so folding there costs no extra round trip per alert, and the
volume stops at the source (one outbox row, one Kafka message, one coordinator transaction per
*update*, not per alert). The fold is written in the same transaction as the alert's inbox row
and evaluation, and an update leaves in the same transaction that clears the fold and moves
``seq``: a crash between folds loses no alert's contribution (its transaction did not commit,
Kafka redelivers the alert), and an update is never sent twice under two ids (its id is
``run_id:seq``; the coordinator's inbox drops a re-published one).

Flapping is counted here too, durably: the follow-ups' firing<->resolved flips in a fixed
window (``flips`` since ``flips_since``) feed :func:`ira.triage.decide.decide`, which
ignores a flapping group's follow-ups with the count as basis.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from pydantic import AwareDatetime

from ira.core.alert import SEVERITY_RANK, AlertStatus, DecisionKind, Severity
from ira.core.commit import OutboxMessage
from ira.core.decision import (
    NAMES_KEPT,
    ROUTES,
    UPDATE_MESSAGE,
    IncidentChanges,
    IncidentUpdate,
    UpdateTrigger,
    update_id,
)
from ira.core.envelope import Envelope, topic_name
from ira.core.model import Model
from ira.triage.decide import FollowUpFlips


class Subscription(Model):
    """One row of ``incident_updates``: a run's subscription to its incident's changes."""

    tenant_id: str
    run_id: str
    incident_id: str
    version: int = 0
    """The row's compare-and-set version; 0: not stored yet."""
    seq: int = 0
    """Updates sent so far; the pending fold goes out as ``seq + 1``."""
    changes: IncidentChanges | None = None
    """What waits to be sent (None: nothing)."""
    due_at: AwareDatetime | None = None
    sent_at: AwareDatetime | None = None
    sent_severity: Severity
    """The incident's severity as the run last heard it (at its start, then per update)."""
    sent_resolved: bool = False
    """Whether the last update told the run that every alert resolved."""
    flips: int = 0
    flips_since: AwareDatetime | None = None
    updated_at: AwareDatetime


@dataclass(frozen=True, slots=True)
class FollowUp:
    """One follow-up alert event, with the incident as it left it. A plain dataclass: built by
    triage from values already validated, once per follow-up, and never crosses a boundary."""

    name: str
    status: AlertStatus
    previous: AlertStatus | None
    """The alert's last state in the incident (None: it joins the incident now)."""
    evaluation_id: str
    incident_version: int
    firing_count: int
    severity: Severity
    at: datetime
    traceparent: str | None = None


def subscribe(tenant_id: str, run_id: str, incident_id: str, *, severity: Severity, firing_count: int,
              now: datetime) -> Subscription:
    """A run's subscription before its first follow-up: it knows the incident as triage left it."""
    return Subscription(tenant_id=tenant_id, run_id=run_id, incident_id=incident_id, sent_severity=severity,
                        sent_resolved=firing_count == 0, updated_at=now)


def is_flip(previous: AlertStatus | None, status: AlertStatus) -> bool:
    """A known alert changing firing<->resolved (a new alert joining is not a flip)."""
    return previous is not None and previous != status


def flips_with(sub: Subscription, *, flip: bool, now: datetime, window: timedelta) -> FollowUpFlips:
    """The window's flips counting this follow-up; a window older than ``window`` starts over."""
    fresh = sub.flips_since is None or now - sub.flips_since >= window
    since = now if fresh or sub.flips_since is None else sub.flips_since
    return FollowUpFlips(transitions=(0 if fresh else sub.flips) + int(flip), since=since,
                         window_seconds=window.total_seconds())


def counted(sub: Subscription, flips: FollowUpFlips, *, now: datetime) -> Subscription:
    """``sub`` with the flip count of a follow-up that was decided (delivered or ignored as flapping)."""
    return sub.model_copy(update={"flips": flips.transitions, "flips_since": flips.since, "updated_at": now})


def fold(sub: Subscription, follow_up: FollowUp, *, interval: timedelta,
         flips: FollowUpFlips | None = None) -> Subscription:
    """``sub`` with ``follow_up`` folded into its pending changes, and when they are due; with
    ``flips``, also :func:`counted` (one copy of the subscription per follow-up, not three)."""
    changes = _folded(sub.changes or IncidentChanges(), follow_up)
    update: dict[str, object] = {"changes": changes, "updated_at": follow_up.at,
                                 "due_at": _due_at(sub, changes, now=follow_up.at, interval=interval)}
    if flips is not None:
        update.update(flips=flips.transitions, flips_since=flips.since)
    return sub.model_copy(update=update)


def _folded(changes: IncidentChanges, f: FollowUp) -> IncidentChanges:
    joined, resolved = f.previous is None, f.status == AlertStatus.RESOLVED and f.previous == AlertStatus.FIRING
    refired = f.status == AlertStatus.FIRING and f.previous == AlertStatus.RESOLVED
    return changes.model_copy(update={
        "events": changes.events + 1, "joined": changes.joined + joined, "resolved": changes.resolved + resolved,
        "refired": changes.refired + refired,
        "names_joined": _with(changes.names_joined, f.name) if joined else changes.names_joined,
        "names_resolved": _with(changes.names_resolved, f.name) if resolved else changes.names_resolved,
        "first_seen": changes.first_seen or f.at, "last_seen": f.at, "incident_version": f.incident_version,
        "firing_count": f.firing_count, "severity": f.severity, "last_evaluation_id": f.evaluation_id,
        "traceparent": changes.traceparent or f.traceparent})


def _with(names: tuple[str, ...], name: str) -> tuple[str, ...]:
    if name in names or len(names) >= NAMES_KEPT:
        return names
    return tuple(sorted((*names, name)))


def urgency(sub: Subscription) -> UpdateTrigger | None:
    """A pending change that matters enough to go out now, whatever the interval."""
    return None if sub.changes is None else _urgency(sub, sub.changes)


def _urgency(sub: Subscription, changes: IncidentChanges) -> UpdateTrigger | None:
    """:func:`urgency` of ``sub`` were ``changes`` its pending ones."""
    if changes.firing_count == 0 and not sub.sent_resolved:
        return UpdateTrigger.ALL_RESOLVED
    if SEVERITY_RANK[changes.severity] > SEVERITY_RANK[sub.sent_severity]:
        return UpdateTrigger.SEVERITY_RAISED
    return None


def _due_at(before: Subscription, changes: IncidentChanges, *, now: datetime, interval: timedelta) -> datetime:
    """When ``before`` with ``changes`` folded in is due."""
    if _urgency(before, changes) is not None:
        return now
    if before.changes is not None and before.due_at is not None:
        return before.due_at  # already waiting: the interval since the last update decides
    return now if before.sent_at is None else max(now, before.sent_at + interval)


def is_due(sub: Subscription, now: datetime) -> bool:
    return sub.changes is not None and sub.due_at is not None and sub.due_at <= now


def update_of(sub: Subscription) -> IncidentUpdate:
    """The pending changes as the run's next update."""
    assert sub.changes is not None, "nothing to send"
    seq = sub.seq + 1
    return IncidentUpdate(update_id=update_id(sub.run_id, seq), tenant_id=sub.tenant_id, incident_id=sub.incident_id,
                          run_id=sub.run_id, seq=seq, trigger=urgency(sub) or UpdateTrigger.INTERVAL,
                          changes=sub.changes)


def sent(sub: Subscription, *, now: datetime) -> Subscription:
    """``sub`` once its pending changes went out: nothing waits, the run knows what they said."""
    assert sub.changes is not None, "nothing was sent"
    return sub.model_copy(update={
        "seq": sub.seq + 1, "changes": None, "due_at": None, "sent_at": now, "updated_at": now,
        "sent_severity": sub.changes.severity, "sent_resolved": sub.changes.firing_count == 0})


def update_message(sub: Subscription, at: datetime, *, environment: str) -> OutboxMessage:
    """The outbox message of ``sub``'s pending update; keyed by incident like the run request, so
    an incident's updates stay in order; its id is the update's, so a re-send is one inbox row."""
    update = update_of(sub)
    route = ROUTES[DecisionKind.DELIVER]
    envelope = Envelope(message_id=update.update_id, type=UPDATE_MESSAGE, tenant_id=sub.tenant_id, occurred_at=at,
                        traceparent=update.changes.traceparent, payload=update.model_dump(mode="json"))
    return OutboxMessage(topic=topic_name(route.topic, environment), key=f"{sub.tenant_id}:{sub.incident_id}",
                         envelope=envelope, awaits=route.inbox)
