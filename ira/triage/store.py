"""Triage's SQL, inside the consumer's transaction (the inbox rows are in the same one).

Throughput is statements, so a batch of events costs one read and a handful of writes per
*batch*: :func:`look_up` reads, for every event of the batch in one statement, the group's
open incident, this alert's last state in it, the incident's active run, whether the source
identity was seen before, and when the group key last asked for a run. The writes are collected by
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
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import orjson
from sqlalchemy import Integer, String, bindparam, cast, column, func, literal_column, select, text, type_coerce, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import Dialect, Row
from sqlalchemy.exc import DBAPIError, IntegrityError
from sqlalchemy.ext.asyncio import AsyncConnection
from sqlalchemy.types import NullType

from ira.core.alert import AlertEvent, AlertStatus, Evaluation, Severity
from ira.core.errors import ConcurrentUpdateError
from ira.core.model import Model
from ira.core.states import TERMINAL_RUN_STATES, IncidentStatus
from ira.runtime.store.schema import decisions, runs
from ira.triage.decide import AlertState
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


@dataclass(frozen=True, slots=True)
class Lookup:
    """What one read says about an alert's group and identity (before this batch's changes).
    A dataclass: built per event from rows this module read (the incident is validated)."""

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


_KEY_FIELDS = ("tenant_id", "group_key", "fingerprint", "source_id", "source_event_id")


@dataclass(frozen=True, slots=True)
class LookupKey:
    """What one event's read is about: its group and its alert's identity."""

    tenant_id: str
    group_key: str
    fingerprint: str
    source_id: str
    source_event_id: str

    @classmethod
    def of(cls, alert: AlertEvent, group_key: str) -> LookupKey:
        return cls(tenant_id=alert.tenant_id, group_key=group_key, fingerprint=alert.fingerprint,
                   source_id=alert.source_id, source_event_id=alert.source_event_id)


def _keys(dialect: str) -> Any:
    """The keys of one read as a table ``keys(idx, tenant_id, group_key, ...)`` from a fixed
    number of parameters, whatever the batch size: one statement text, planned cheaply and
    prepared once (a VALUES row per key costs PostgreSQL more to plan than to run).

    PostgreSQL: ``unnest`` of one array per column. SQLite: ``json_each`` of one JSON array of rows.
    """
    names = ("idx", *_KEY_FIELDS)
    if dialect == "postgresql":
        arrays = [cast(bindparam(f"k_{name}"), postgresql.ARRAY(Integer if name == "idx" else String))
                  for name in names]
        table = func.unnest(*arrays).table_valued(*(column(name) for name in names), name="k").render_derived()
        return select(*(table.c[name] for name in names)).cte("keys")
    rows = func.json_each(bindparam("k_rows", type_=String)).table_valued("value", name="k")
    return select(*(func.json_extract(rows.c.value, literal_column(f"'$[{i}]'")).label(name)
                    for i, name in enumerate(names))).select_from(rows).cte("keys")


def _key_params(dialect: str, keys: Sequence[LookupKey]) -> dict[str, Any]:
    if dialect == "postgresql":
        columns = {f"k_{name}": [getattr(k, name) for k in keys] for name in _KEY_FIELDS}
        return {"k_idx": list(range(len(keys))), **columns}
    return {"k_rows": orjson.dumps([(i, k.tenant_id, k.group_key, k.fingerprint, k.source_id, k.source_event_id)
                                    for i, k in enumerate(keys)]).decode()}


def _look_up_query(dialect: str) -> Any:
    """One row per key whatever exists: the keys outer-joined to their group's open incident,
    whose columns come as the driver gives them (``_incident`` converts them, once per incident;
    ``aware`` the two datetimes of the key's own)."""
    keys = _keys(dialect)
    active = (select(runs.c.run_id)  # != per state, not NOT IN: an expanding IN re-renders the SQL per call
              .where(runs.c.tenant_id == incidents.c.tenant_id, runs.c.incident_id == incidents.c.incident_id,
                     *(runs.c.state != literal_column(f"'{state}'") for state in _TERMINAL))
              .order_by(runs.c.created_at).limit(1).scalar_subquery())

    def last_state(col: Any) -> Any:  # this alert's latest state in the incident (index range scan, newest first)
        return (select(col)
                .where(alerts.c.tenant_id == incidents.c.tenant_id, alerts.c.incident_id == incidents.c.incident_id,
                       alerts.c.fingerprint == keys.c.fingerprint)
                .order_by(alerts.c.state_at.desc(), alerts.c.status.desc()).limit(1).scalar_subquery())

    def first_of_identity(col: Any) -> Any:
        return (select(col)
                .where(alerts.c.tenant_id == keys.c.tenant_id, alerts.c.source_id == keys.c.source_id,
                       alerts.c.source_event_id == keys.c.source_event_id)
                .scalar_subquery())

    prior = incidents.alias("prior")
    group_last_run = (select(prior.c.last_run_at)
                      .where(prior.c.tenant_id == keys.c.tenant_id, prior.c.group_key == keys.c.group_key,
                             prior.c.last_run_at.is_not(None))
                      .order_by(prior.c.last_run_at.desc()).limit(1).scalar_subquery())
    joined = keys.outerjoin(incidents, (incidents.c.tenant_id == keys.c.tenant_id)
                            & (incidents.c.group_key == keys.c.group_key) & incidents.c.closed_at.is_(None))
    return select(
        keys.c.idx, *(type_coerce(c, NullType()).label(c.name) for c in incidents.c),
        active.label("active_run_id"), last_state(alerts.c.status).label("alert_status"),
        type_coerce(last_state(alerts.c.state_at), NullType()).label("alert_at"),  # raw: aware() converts it
        first_of_identity(alerts.c.event_id).label("first_event_id"),
        first_of_identity(alerts.c.incident_id).label("first_incident_id"),
        type_coerce(group_last_run, NullType()).label("group_last_run_at"),  # raw: aware() converts it
    ).select_from(joined)


def _change_statement() -> Any:
    return (update(incidents)
            .where(incidents.c.tenant_id == bindparam("b_tenant_id"),
                   incidents.c.incident_id == bindparam("b_incident_id"),
                   incidents.c.version == bindparam("b_read_version"), incidents.c.closed_at.is_(None))
            .values({name: bindparam(f"b_{name}") for name in _MUTABLE}))


def _change_many_statement() -> Any:
    """PostgreSQL's compare-and-set of many incidents: the new values as ``unnest`` of one array per column."""
    types: dict[str, Any] = {"tenant_id": String, "incident_id": String, "read_version": Integer}
    types.update({name: incidents.c[name].type for name in _MUTABLE})
    names = list(types)
    arrays = [cast(bindparam(f"u_{name}"), postgresql.ARRAY(types[name])) for name in names]
    new = func.unnest(*arrays).table_valued(*(column(name) for name in names), name="new").render_derived()
    return (update(incidents)
            .where(incidents.c.tenant_id == new.c.tenant_id, incidents.c.incident_id == new.c.incident_id,
                   incidents.c.version == new.c.read_version, incidents.c.closed_at.is_(None))
            .values({name: new.c[name] for name in _MUTABLE})
            .returning(incidents.c.incident_id))


_MUTABLE = ("status", "version", "severity", "firing_count", "updated_at", "quiet_until", "closed_at", "last_run_at",
            "run_evaluation_id")


class _Statements:
    """Statements built once per dialect: building SQLAlchemy expressions per event costs more
    than running them."""

    def __init__(self, dialect: str) -> None:
        insert = (postgresql if dialect == "postgresql" else sqlite).insert
        self.look_up = _look_up_query(dialect)
        self.change = _change_statement()
        self.change_many: Any = _change_many_statement() if dialect == "postgresql" else None
        self.insert_incident = incidents.insert()
        self.insert_alert = alerts.insert()
        self.insert_evaluation = decisions.insert()
        self.insert_changes = insert(changes).on_conflict_do_nothing()


_BUILT: dict[str, _Statements] = {}


def _sql(conn: AsyncConnection) -> _Statements:
    dialect = conn.dialect.name
    if dialect not in _BUILT:
        _BUILT[dialect] = _Statements(dialect)
    return _BUILT[dialect]


def aware(value: Any) -> datetime | None:
    """Scalar subqueries hand SQLite's datetimes back naive (or as text): make them UTC."""
    if value is None:
        return None
    if isinstance(value, str):
        value = datetime.fromisoformat(value)
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


_RESULT_PROCESSORS: dict[tuple[str, str], tuple[tuple[str, Any], ...]] = {}


def _incident_processors(dialect: Dialect) -> tuple[tuple[str, Any], ...]:
    """(column, the driver value's processor or None) of ``incidents``, what SQLAlchemy would
    apply to each column of each row, kept per dialect."""
    found = _RESULT_PROCESSORS.get((dialect.name, dialect.driver))
    if found is None:
        found = _RESULT_PROCESSORS[(dialect.name, dialect.driver)] = tuple(
            (c.name, c.type._cached_result_processor(dialect, None)) for c in incidents.c)
    return found


def _incident(fields: Any, dialect: Dialect) -> IncidentRecord:
    """The incident of a read's row, its columns converted from the driver's values here: the
    read hands them over raw (``_look_up_query``), since every alert of a group has its
    incident's columns on its row and converting them all (datetimes parsed from SQLite's text,
    the labels' JSON) for the one record kept per incident was most of the read's Python."""
    return IncidentRecord.model_validate(
        {name: fields[name] if process is None else process(fields[name])
         for name, process in _incident_processors(dialect)})


def _lookup(row: Row[Any], records: dict[tuple[str, str], IncidentRecord], dialect: Dialect) -> Lookup:
    """One key's answer; ``records`` holds the incidents this read validated already (a group's
    alerts share their incident's row: converted and validated once per read, not once per alert)."""
    fields = row._mapping
    incident = None
    if fields["incident_id"] is not None:
        ref = (fields["tenant_id"], fields["incident_id"])
        incident = records.get(ref)
        if incident is None:
            incident = records[ref] = _incident(fields, dialect)
    alert, alert_at = None, aware(fields["alert_at"])
    if fields["alert_status"] and alert_at is not None:  # the alert's state and its time, from one row
        alert = AlertState(status=AlertStatus(fields["alert_status"]), at=alert_at)
    return Lookup(incident=incident, alert=alert, active_run_id=fields["active_run_id"],
                  first_event_id=fields["first_event_id"], first_incident_id=fields["first_incident_id"],
                  group_last_run_at=aware(fields["group_last_run_at"]))


_PLAN_PER_BATCH = text("SET LOCAL plan_cache_mode = force_custom_plan")


async def look_up(conn: AsyncConnection, keys: Sequence[LookupKey]) -> list[Lookup]:
    """Everything the decisions about ``keys`` read from the database, in one statement: one
    planning and one round trip per batch instead of one per event."""
    if not keys:
        return []
    if conn.dialect.name == "postgresql":
        # Plan this read for its own keys, every batch: a cached generic plan is blind to how
        # many keys there are and keeps the shape it got while the tables were small (measured:
        # 4 ms planned per batch, 15-60 ms generic, for 200 keys). SET LOCAL ends with the transaction.
        await conn.execute(_PLAN_PER_BATCH)
    params = _key_params(conn.dialect.name, keys)
    rows = {row.idx: row for row in await conn.execute(_sql(conn).look_up, params)}
    records: dict[tuple[str, str], IncidentRecord] = {}
    return [_lookup(rows[i], records, conn.dialect) for i in range(len(keys))]


async def insert_incidents(conn: AsyncConnection, records: Sequence[IncidentRecord]) -> None:
    if records:
        await conn.execute(_sql(conn).insert_incident, [r.model_dump() for r in records])


async def update_incidents(conn: AsyncConnection, changed: Sequence[tuple[IncidentRecord, int]]) -> None:
    """Compare-and-set every incident this batch changed, each from the version it read.

    PostgreSQL: one ``UPDATE .. FROM unnest(..) RETURNING`` for all of them (a statement per
    incident was a third of a batch's time there). SQLite: one UPDATE each, in the fixed order
    given (local calls; its multi-row UPDATE would need the datetimes in SQLite's own text form).
    """
    if not changed:
        return
    if conn.dialect.name == "postgresql":
        params = {f"u_{name}": [getattr(r, name) for r, _ in changed]
                  for name in ("tenant_id", "incident_id", *_MUTABLE)}
        params["u_read_version"] = [version for _, version in changed]
        done = (await conn.execute(_sql(conn).change_many, params)).all()
        if len(done) != len(changed):
            moved = {r.incident_id for r, _ in changed} - {row.incident_id for row in done}
            raise ConcurrentUpdateError(f"incident(s) {sorted(moved)} moved past the version read")
        return
    for record, read_version in changed:
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


async def insert_changes(conn: AsyncConnection, rows: Sequence[dict[str, Any]]) -> None:
    """Store deploy/config changes (``ChangeEvent.model_dump()``); known source identities are skipped."""
    if rows:
        await conn.execute(_sql(conn).insert_changes, list(rows))


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


def evaluation_row(evaluation: Evaluation) -> dict[str, Any]:
    """The ``decisions`` row of ``evaluation``: its fields as they are. ``model_dump`` gave the same
    values (its basis holds plain JSON values, built for it) after walking and copying every one of
    them, once per event."""
    return dict(evaluation.__dict__)
