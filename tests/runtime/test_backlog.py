"""Queues that wait in SQL (approvals, UNKNOWN Operations, deliveries) are counted with the age of
their oldest item, and reach /metrics through the scanner's report."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import insert

from ira.runtime.scanner import ScanReport
from ira.runtime.store.backlog import Backlog, Queue, queue_query, read_backlog
from ira.runtime.store.database import Database
from ira.runtime.store.schema import (
    APPROVAL_PENDING,
    DELIVERY_PENDING,
    OPERATION_UNKNOWN,
    approvals,
    deliveries,
    operations,
)
from ira.runtime.telemetry import Metrics
from ira.runtime.wiring import record_scan

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


def approval(approval_id: str, state: str, created: datetime) -> dict[str, object]:
    return {"tenant_id": "acme", "approval_id": approval_id, "run_id": "run-1", "step_id": "approve_ticket",
            "action": "create_ticket", "payload_hash": "sha256:x", "resource_version": 1, "required_role": "approver",
            "state": state, "expires_at": NOW + timedelta(minutes=30), "created_at": created}


def operation(operation_id: str, fact: str, updated: datetime) -> dict[str, object]:
    return {"tenant_id": "acme", "operation_id": operation_id, "run_id": "run-1", "step_id": "create_ticket",
            "kind": "create_ticket", "idempotency_key": f"k-{operation_id}", "payload_hash": "sha256:x",
            "fact_state": fact, "handling_state": "none", "owner_epoch": 1, "created_at": updated,
            "updated_at": updated}


def delivery(notification_id: str, state: str, created: datetime) -> dict[str, object]:
    return {"tenant_id": "globex", "notification_id": notification_id, "run_id": "run-2", "channel": "webhook",
            "state": state, "attempts": 0, "receipts": [], "created_at": created, "updated_at": created}


async def test_each_queue_counts_what_waits_and_the_age_of_the_oldest(db: Database) -> None:
    async with db.transaction() as conn:
        assert await read_backlog(conn, now=NOW) == Backlog()
        await conn.execute(insert(approvals), [approval("a1", "pending", NOW - timedelta(minutes=12)),
                                               approval("a2", "pending", NOW - timedelta(minutes=2)),
                                               approval("a3", "approved", NOW - timedelta(hours=5))])
        await conn.execute(insert(operations), [operation("o1", "unknown", NOW - timedelta(minutes=7)),
                                                operation("o2", "confirmed_success", NOW - timedelta(hours=1))])
        await conn.execute(insert(deliveries), [delivery("n1", "pending", NOW - timedelta(seconds=30)),
                                                delivery("n2", "accepted", NOW - timedelta(hours=2))])
        backlog = await read_backlog(conn, now=NOW)
    assert backlog.approvals_waiting == Queue(count=2, oldest_age=timedelta(minutes=12))
    assert backlog.operations_unknown == Queue(count=1, oldest_age=timedelta(minutes=7))
    assert backlog.deliveries_pending == Queue(count=1, oldest_age=timedelta(seconds=30))


def test_the_scan_report_sets_the_waiting_gauges() -> None:
    metrics = Metrics()
    waiting = Queue(count=3, oldest_age=timedelta(seconds=90))
    record_scan(metrics, ScanReport(backlog=Backlog(approvals_waiting=waiting)), "prod")
    shown = metrics.render().decode()
    assert 'ira_waiting{queue="approvals"} 3.0' in shown
    assert 'ira_waiting_oldest_age_seconds{queue="approvals"} 90.0' in shown
    assert 'ira_waiting{queue="operations_unknown"} 0.0' in shown


WAITING_QUERIES = [
    ("ix_approvals_pending", approvals.c.created_at, APPROVAL_PENDING),
    ("ix_operations_unknown", operations.c.updated_at, OPERATION_UNKNOWN),
    ("ix_deliveries_pending", deliveries.c.created_at, DELIVERY_PENDING),
]


@pytest.mark.parametrize(("index", "since", "waiting"), WAITING_QUERIES, ids=[q[0] for q in WAITING_QUERIES])
async def test_each_backlog_read_uses_its_partial_index(db: Database, index: str, since: Any, waiting: Any) -> None:
    """Given the migrated schema, the scanner's backlog aggregate is planned over the partial
    index of the waiting rows, not over the whole table (which grows with every run ever)."""
    async with db.transaction() as conn:
        sql = str(queue_query(since, waiting).compile(dialect=conn.dialect, compile_kwargs={"literal_binds": True}))
        if conn.dialect.name == "sqlite":
            plan = " ".join(str(row[-1]) for row in await conn.exec_driver_sql(f"EXPLAIN QUERY PLAN {sql}"))
        else:  # tiny tables are scanned whatever the indexes: ask whether the index can serve at all
            await conn.exec_driver_sql("SET LOCAL enable_seqscan = off")
            plan = " ".join(str(row[0]) for row in await conn.exec_driver_sql(f"EXPLAIN {sql}"))
    assert index in plan, plan
