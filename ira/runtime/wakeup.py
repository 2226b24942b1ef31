"""Step wake-ups: the message that tells workers "this step may be claimable now".

A wake-up is a hint, never an order: the claim (C3) decides. So wake-ups can be duplicated,
lost or sent by the scanner again without harm.
"""

from __future__ import annotations

from datetime import datetime

from ira.core.commit import OutboxMessage
from ira.core.envelope import Envelope, Topic, topic_name
from ira.core.ids import new_event_id

STEP_READY = "step.ready"
TIMER_FIRED = "timer.fired"


def step_wakeup(
    tenant_id: str, run_id: str, step_id: str, *, kind: str, environment: str, at: datetime
) -> OutboxMessage:
    """An outbox message that wakes ``step_id`` of ``run_id`` (keyed by run for ordering)."""
    envelope = Envelope(message_id=new_event_id(), type=STEP_READY, tenant_id=tenant_id, occurred_at=at,
                        payload={"run_id": run_id, "step_id": step_id, "kind": kind})
    return OutboxMessage(topic=topic_name(Topic.STEPS, environment), key=f"{tenant_id}:{run_id}", envelope=envelope)
