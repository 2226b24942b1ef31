"""Triage's SQL, inside the consumer's transaction (the inbox rows are in the same one).

Throughput is statements, so a batch of events costs one read per event and a handful of
writes per *batch*: :func:`look_up` reads, in one statement, the group's open incident, this
alert's last state in it, the incident's active run, whether the source identity was seen
before, and when the group key last asked for a run. The writes are collected by
:class:`ira.triage.batch.Pending` and flushed at the end of the transaction: one multi-row
insert each for new incidents, alerts and evaluations, one compare-and-set UPDATE per changed
incident, and the outbox rows.

Concurrency: every incident write is a compare-and-set. A new incident is a plain insert
against the partial unique index (one open incident per group key); a changed one is updated
``WHERE version = <version read> AND closed_at IS NULL``. A loser — or an alert whose source
identity another worker stored first — raises ConcurrentUpdateError: the transaction rolls
back and the consumer retries its events one by one, which then see the winner's rows.
PostgreSQL deadlocks and serialization failures are the same kind of conflict.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import bindparam, literal, literal_column, select, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import Row
from sqlalchemy.exc import DBAPIError, IntegrityError
from sqlalchemy.ext.asyncio import AsyncConnection

from ira.core.alert import AlertEvent, AlertStatus, ChangeEvent, Severity
from ira.core.errors import ConcurrentUpdateError
from ira.core.model import Model
from ira.core.states import TERMINAL_RUN_STATES
from ira.runtime.store.schema import decisions, runs
from ira.triage.decide import AlertState, IncidentStatus
from ira.triage.tables import alerts, changes, incidents

_TERMINAL = sorted(s.value for s in TERMINAL_RUN_STATES)
_CONFLICT_SQLSTATES = {"40001", "40P01"}  # serialization failure, deadlock


class IncidentRecord(Model):
    """One row of ``incidents``."""

    tenant_id: str
    incident_id: str
    group_key: str
    status: IncidentStatus
    version: int
    title: str
    severity: Severity
    service: str | None
    environment: str | None
    labels: dict[str, str]
    firing_count: int
    opened_at: datetime
    updated_at: datetime
    quiet_until: datetime | None = None
    closed_at: datetime | None = None
    last_run_at: datetime | None = None
    """When the group key last asked for a run (this incident or an earlier one): the cooldown's anchor."""
    run_evaluation_id: str | None = None


class Lookup(Model):
    """What one read says about an alert's group and identity (before this batch's changes)."""

    incident: IncidentRecord | None
    alert: AlertState | None
    """This alert's last state in ``incident``."""
    active_run_id: str | None
    first_event_id: str | None
    """The event that first had this source identity (None: the identity is new)."""
    first_incident_id: str | None
    group_last_run_at: datetime | None


@contextmanager
def conflicts_as_retries() -> Iterator[None]:
    """A lost race (unique violation, PostgreSQL deadlock or serialization failure) is a retry."""
    try:
        yield
    except IntegrityError as exc:
        raise ConcurrentUpdateError("another worker wrote the same incident or alert first: retry") from exc
    except DBAPIError as exc:
        state = getattr(exc.orig, "sqlstate", None) or getattr(exc.orig, "pgcode", None)
        if state in _CONFLICT_SQLSTATES:
            raise ConcurrentUpdateError(f"database conflict {state}: retry") from exc
        raise


def _last_state(column: Any) -> Any:
    """This alert's latest recorded state in the incident (an index range scan, newest first)."""
    return (select(column)
            .where(alerts.c.tenant_id == incidents.c.tenant_id, alerts.c.incident_id == incidents.c.incident_id,
                   alerts.c.fingerprint == bindparam("b_fingerprint"))
            .order_by(alerts.c.state_at.desc(), alerts.c.status.desc()).limit(1).scalar_subquery())


def _first_of_identity(column: Any) -> Any:
    return (select(column)
            .where(alerts.c.tenant_id == bindparam("b_tenant_id"), alerts.c.source_id == bindparam("b_source_id"),
                   alerts.c.source_event_id == bindparam("b_source_event_id"))
            .scalar_subquery())


def _look_up_query() -> Any:
    """One row whatever exists: a one-row table, outer-joined to the group's open incident."""
    active = (select(runs.c.run_id)  # != per state, not NOT IN: an expanding IN re-renders the SQL per call
              .where(runs.c.tenant_id == incidents.c.tenant_id, runs.c.incident_id == incidents.c.incident_id,
                     *(runs.c.state != literal_column(f"'{state}'") for state in _TERMINAL))
              .order_by(runs.c.created_at).limit(1).scalar_subquery())
    prior = incidents.alias("prior")
    group_last_run = (select(prior.c.last_run_at)
                      .where(prior.c.tenant_id == bindparam("b_tenant_id"),
                             prior.c.group_key == bindparam("b_group_key"), prior.c.last_run_at.is_not(None))
                      .order_by(prior.c.last_run_at.desc()).limit(1).scalar_subquery())
    one = select(literal(1).label("one")).subquery("one")
    joined = one.outerjoin(incidents, (incidents.c.tenant_id == bindparam("b_tenant_id"))
                           & (incidents.c.group_key == bindparam("b_group_key")) & incidents.c.closed_at.is_(None))
    return select(
        *incidents.c, active.label("active_run_id"), _last_state(alerts.c.status).label("alert_status"),
        _last_state(alerts.c.state_at).label("alert_at"), _first_of_identity(alerts.c.event_id).label("first_event_id"),
        _first_of_identity(alerts.c.incident_id).label("first_incident_id"),
        group_last_run.label("group_last_run_at"),
    ).select_from(joined)


def _change_statement() -> Any:
    return (update(incidents)
            .where(incidents.c.tenant_id == bindparam("b_tenant_id"),
                   incidents.c.incident_id == bindparam("b_incident_id"),
                   incidents.c.version == bindparam("b_read_version"), incidents.c.closed_at.is_(None))
            .values({name: bindparam(f"b_{name}") for name in _MUTABLE}))


_MUTABLE = ("status", "version", "severity", "firing_count", "updated_at", "quiet_until", "closed_at", "last_run_at",
            "run_evaluation_id")


class _Statements:
    """Statements built once per dialect: building SQLAlchemy expressions per event costs more
    than running them."""

    def __init__(self, dialect: str) -> None:
        insert = (postgresql if dialect == "postgresql" else sqlite).insert
        self.look_up = _look_up_query()
        self.change = _change_statement()
        self.insert_incident = incidents.insert()
        self.insert_alert = alerts.insert()
        self.insert_evaluation = decisions.insert()
        self.insert_change = insert(changes).on_conflict_do_nothing().returning(changes.c.event_id)


_BUILT: dict[str, _Statements] = {}


def _sql(conn: AsyncConnection) -> _Statements:
    dialect = conn.dialect.name
    if dialect not in _BUILT:
        _BUILT[dialect] = _Statements(dialect)
    return _BUILT[dialect]


def _aware(value: Any) -> datetime | None:
    """Scalar subqueries hand SQLite's datetimes back naive (or as text): make them UTC."""
    if value is None:
        return None
    if isinstance(value, str):
        value = datetime.fromisoformat(value)
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def _lookup(row: Row[Any]) -> Lookup:
    fields = row._mapping
    incident = None
    if fields["incident_id"] is not None:
        incident = IncidentRecord.model_validate({c.name: fields[c.name] for c in incidents.c})
    alert = AlertState(status=fields["alert_status"], at=_aware(fields["alert_at"])) if fields["alert_status"] else None
    return Lookup(incident=incident, alert=alert, active_run_id=fields["active_run_id"],
                  first_event_id=fields["first_event_id"], first_incident_id=fields["first_incident_id"],
                  group_last_run_at=_aware(fields["group_last_run_at"]))


async def look_up(conn: AsyncConnection, alert: AlertEvent, group_key: str) -> Lookup:
    """Everything one decision reads from the database, in one statement."""
    params = {"b_tenant_id": alert.tenant_id, "b_group_key": group_key, "b_fingerprint": alert.fingerprint,
              "b_source_id": alert.source_id, "b_source_event_id": alert.source_event_id}
    return _lookup((await conn.execute(_sql(conn).look_up, params)).one())


async def insert_incidents(conn: AsyncConnection, records: Sequence[IncidentRecord]) -> None:
    if records:
        await conn.execute(_sql(conn).insert_incident, [r.model_dump() for r in records])


async def update_incident(conn: AsyncConnection, record: IncidentRecord, *, read_version: int) -> None:
    """Compare-and-set an incident this batch changed from ``read_version`` to ``record``."""
    values = {f"b_{name}": getattr(record, name) for name in _MUTABLE}
    values.update(b_tenant_id=record.tenant_id, b_incident_id=record.incident_id, b_read_version=read_version)
    if (await conn.execute(_sql(conn).change, values)).rowcount != 1:
        raise ConcurrentUpdateError(f"incident {record.incident_id} moved past version {read_version}")


async def insert_alerts(conn: AsyncConnection, rows: Sequence[dict[str, Any]]) -> None:
    if rows:
        await conn.execute(_sql(conn).insert_alert, list(rows))


async def insert_evaluations(conn: AsyncConnection, rows: Sequence[dict[str, Any]]) -> None:
    if rows:
        await conn.execute(_sql(conn).insert_evaluation, list(rows))


async def record_change(conn: AsyncConnection, change: ChangeEvent) -> bool:
    """Store a deploy/config change; False if its source identity is known (a duplicate)."""
    return (await conn.execute(_sql(conn).insert_change, change.model_dump())).first() is not None


async def close_quiet_incidents(conn: AsyncConnection, *, now: datetime) -> int:
    """Close every incident whose alerts all resolved and whose quiet period passed.

    A maintenance sweep across tenants (like the scanner's): it touches only rows that every
    tenant's own lookup would close anyway, so the API never shows a stale "resolved".
    """
    result = await conn.execute(
        update(incidents)
        .where(incidents.c.closed_at.is_(None), incidents.c.firing_count == 0, incidents.c.quiet_until <= now)
        .values(status=IncidentStatus.CLOSED, closed_at=now, updated_at=now))
    return result.rowcount


def state_at(alert: AlertEvent) -> datetime:
    """The instant the event's state began: a firing's start, a resolve's end (or its receipt)."""
    if alert.status == AlertStatus.RESOLVED:
        return alert.ends_at or alert.received_at
    return alert.starts_at


def alert_row(alert: AlertEvent, *, group_key: str, incident_id: str | None) -> dict[str, Any]:
    """The ``alerts`` row of one event, with its normalized payload kept for replay."""
    return {
        "tenant_id": alert.tenant_id, "event_id": alert.event_id, "source_id": alert.source_id,
        "source_event_id": alert.source_event_id, "fingerprint": alert.fingerprint, "group_key": group_key,
        "incident_id": incident_id, "status": alert.status, "severity": alert.severity, "name": alert.name,
        "state_at": state_at(alert), "received_at": alert.received_at, "payload": alert.model_dump(mode="json"),
    }
