"""An incident's life, as pure functions on its record: open, change, close.

An incident stays the group's open incident until every alert in it resolved *and* the quiet
period passed: a resolve that brings the firing count to zero starts the quiet period, a
re-fire inside it keeps the same incident (and ends the quiet period). Every change of its
alerts moves ``version`` by one; approvals bind to it, so a new alert makes an old approval
stale. Closing does not move the version (the alerts did not change).
"""

from __future__ import annotations

from datetime import datetime, timedelta

from ira.core import limits
from ira.core.alert import AlertEvent, AlertStatus
from ira.core.states import IncidentStatus
from ira.triage.decide import AlertState, firing_delta, max_severity, status_for
from ira.triage.store import IncidentRecord


def title_of(alert: AlertEvent) -> str:
    return (alert.annotations.get("summary") or alert.name)[:limits.TITLE_MAX]


def opened(
    alert: AlertEvent, *, incident_id: str, group_key: str, labels: dict[str, str], now: datetime,
    last_run_at: datetime | None, run_evaluation_id: str | None,
) -> IncidentRecord:
    """A new incident opened by a firing ``alert`` (a run request restarts the group's cooldown)."""
    return IncidentRecord(
        tenant_id=alert.tenant_id, incident_id=incident_id, group_key=group_key, status=IncidentStatus.OPEN,
        version=1, title=title_of(alert), severity=alert.severity, service=alert.service,
        environment=alert.environment, labels=labels, firing_count=1, opened_at=now, updated_at=now,
        last_run_at=now if run_evaluation_id else last_run_at, run_evaluation_id=run_evaluation_id)


def changed(
    record: IncidentRecord, alert: AlertEvent, *, previous: AlertState | None, now: datetime,
    quiet_period: timedelta, run_evaluation_id: str | None,
) -> IncidentRecord:
    """``record`` after ``alert`` took its new state in it: the next version."""
    firing = record.firing_count + firing_delta(previous, alert.status)
    update: dict[str, object] = {
        "version": record.version + 1, "firing_count": firing, "status": status_for(firing),
        "severity": max_severity(record.severity, alert.severity), "updated_at": now,
        "quiet_until": None if firing > 0 else now + quiet_period,
    }
    if run_evaluation_id is not None:
        update.update(last_run_at=now, run_evaluation_id=run_evaluation_id)
    return record.model_copy(update=update)


def is_quiet_over(record: IncidentRecord, now: datetime) -> bool:
    """Every alert resolved and the quiet period passed: the next alert opens a new incident."""
    return record.firing_count == 0 and record.quiet_until is not None and record.quiet_until <= now


def closed(record: IncidentRecord, now: datetime) -> IncidentRecord:
    return record.model_copy(update={"status": IncidentStatus.CLOSED, "closed_at": now, "updated_at": now})


def alert_state(alert: AlertEvent, at: datetime) -> AlertState:
    return AlertState(status=AlertStatus(alert.status), at=at)
