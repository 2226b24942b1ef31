"""The staging sink: where a staging run's notifications go. It records them and sends nothing,
so a replay never reaches a production Slack channel or webhook."""

from __future__ import annotations

from ira.core.clock import Clock
from ira.core.delivery import Notification, Receipt
from ira.core.replay import STAGING_SINK
from ira.core.states import DeliveryState


class StagingSink:
    name = STAGING_SINK

    def __init__(self, clock: Clock) -> None:
        self._clock = clock

    async def send(self, notification: Notification, *, attempt: int = 0) -> tuple[Receipt, bool]:
        return Receipt(at=self._clock.now(), state=DeliveryState.ACCEPTED,
                       detail={"sink": "staging", "sent": False}), False
