"""An accepted event as the message it becomes on ``ira.alerts.v1`` (whichever commit point)."""

from __future__ import annotations

from ira.core.alert import ALERT_MESSAGE, ALERTS_INBOX, CHANGE_MESSAGE, AlertEvent, ChangeEvent
from ira.core.commit import OutboxMessage
from ira.core.envelope import Envelope


def event_message(topic: str, event: AlertEvent | ChangeEvent, *, traceparent: str | None = None,
                  urgent: bool = False) -> OutboxMessage:
    """The envelope on ``ira.alerts.v1``: alerts keyed ``tenant:fingerprint``, changes ``tenant:service``.

    ``traceparent`` (the request's) travels in the envelope when the record is produced later
    by the relay, so triage's span still continues the webhook's trace. Triage's inbox must
    come to hold it (``awaits``): through the outbox, the scanner re-sends it until it does.
    ``urgent``: its consumer takes it before the rest of its fetch, and triage beside this
    gateway right after the commit (:mod:`ira.sources.urgent`).
    """
    if isinstance(event, AlertEvent):
        kind, key = ALERT_MESSAGE, f"{event.tenant_id}:{event.fingerprint}"
    else:
        kind, key = CHANGE_MESSAGE, f"{event.tenant_id}:{event.service}"
    envelope = Envelope(message_id=event.event_id, type=kind, tenant_id=event.tenant_id,
                        occurred_at=event.received_at, traceparent=traceparent, payload=event.model_dump(mode="json"))
    return OutboxMessage(topic=topic, key=key, envelope=envelope, awaits=ALERTS_INBOX, urgent=urgent)
