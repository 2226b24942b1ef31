"""Asking the notifier to tell people something: a delivery row, its body, its outbox row.

All three are written in the caller's transaction (the approval request, or C6), so a
notification exists exactly when the fact it announces does. The notifier sends what was
committed here and keeps the channel's receipts on the delivery row, apart from the run.
"""

from __future__ import annotations

import logging
from datetime import datetime
from typing import Any

from sqlalchemy.ext.asyncio import AsyncConnection

from ira.coordinator import records
from ira.coordinator.config import WorkflowConfig
from ira.core.commit import OutboxMessage
from ira.core.delivery import DELIVERIES_INBOX, DELIVERY_REQUESTED, Notification, NotificationKind
from ira.core.envelope import Envelope, Topic, topic_name
from ira.core.ids import new_event_id, new_id
from ira.core.replay import STAGING, STAGING_SINK, staging_refusal
from ira.core.run import Run
from ira.runtime import runtrace
from ira.runtime.store import outbox
from ira.runtime.store.artifacts import put_artifact

log = logging.getLogger(__name__)
APPROVAL_REQUESTED = NotificationKind.APPROVAL_REQUESTED
RUN_COMPLETED = NotificationKind.RUN_COMPLETED


async def request_notification(
    conn: AsyncConnection, run: Run, *, kind: str, data: dict[str, Any], config: WorkflowConfig, at: datetime,
) -> OutboxMessage:
    """Store the notification and its delivery row; return the outbox message for the commit.

    ``run_version`` is the version the caller's commit will give the run (one above the
    version it read), so a receiver can tell which state the notification describes. Its data
    passes the redactor: it leaves for a webhook or a chat as stored.
    """
    notification = Notification(notification_id=new_id("ntf"), tenant_id=run.tenant_id, run_id=run.run_id,
                                run_version=run.state_version + 1, kind=kind,
                                data=config.redactor.value({"run_url": config.run_url(run.run_id), **data}),
                                created_at=at)
    ref = await put_artifact(conn, run.tenant_id, notification.model_dump_json().encode(),
                             media_type="application/json", max_bytes=config.artifact_max_bytes, at=at,
                             read_back=False)
    await records.insert_delivery(conn, tenant_id=run.tenant_id, notification_id=notification.notification_id,
                                  run_id=run.run_id, channel=delivery_channel(run, config), payload_ref=ref.ref, at=at)
    envelope = Envelope(message_id=new_event_id(), type=DELIVERY_REQUESTED, tenant_id=run.tenant_id, occurred_at=at,
                        payload={"notification_id": notification.notification_id, "run_id": run.run_id,
                                 "kind": kind})
    return OutboxMessage(topic=topic_name(Topic.DELIVERIES, config.environment),
                         key=f"{run.tenant_id}:{notification.notification_id}", envelope=envelope,
                         awaits=DELIVERIES_INBOX)


def delivery_channel(run: Run, config: WorkflowConfig) -> str:
    """A staging run's notifications go to the staging sink whatever its binding says; a binding
    naming anything else is refused here, at dispatch, and the refusal logged with the run."""
    if run.environment != STAGING:
        return config.notification_channel
    refusal = staging_refusal(run.environment, run.bindings.get("targets"), "notifications")
    if refusal is not None:
        log.warning("run %s: notification target refused (%s); sent to the staging sink", run.run_id, refusal)
    return STAGING_SINK


async def announce(
    conn: AsyncConnection, run: Run, *, kind: NotificationKind, data: dict[str, Any], config: WorkflowConfig,
    at: datetime,
) -> None:
    """A notification for a change committed without a run commit of its own (a work item
    opened, a late ticket confirmed): its outbox row goes in the caller's transaction."""
    message = await request_notification(conn, run, kind=kind, data=data, config=config, at=at)
    await outbox.enqueue(conn, runtrace.stamp((message,), runtrace.parent_for(run.traceparent)), at=at)
