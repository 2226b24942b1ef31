"""Publishing alongside concurrent callers: one producer pass for every caller of a loop turn.

A webhook publishes one or a few records per request, and a gateway under load has dozens of
requests doing so at the same moment. Each :meth:`TogetherPublisher.publish_many` call waits
for the current turn of the event loop to end, and then all calls of that turn go out in one
:meth:`~ira.runtime.bus.producer.BusProducer.publish_together` pass: one PRODUCER span, one
timeout, one enqueue loop, instead of one each. Every caller still gets its own outcome (all
of its records acknowledged, or BrokerUnavailableError) and its records continue its trace.
With no concurrency a call waits for nothing but its own pass.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from opentelemetry.context import Context

from ira.core.commit import OutboxMessage
from ira.core.errors import BrokerUnavailableError
from ira.runtime.bus import tracing
from ira.runtime.bus.producer import BusProducer, Published

_Waiting = tuple[Sequence[OutboxMessage], Context, asyncio.Future[list[Published]]]


class TogetherPublisher:
    """The ``Publisher`` of a hot path: ``publish_many`` with BusProducer's contract, shared passes."""

    def __init__(self, producer: BusProducer) -> None:
        self._producer = producer
        self._waiting: list[_Waiting] = []
        self._passes: set[asyncio.Task[None]] = set()
        self.passes = 0
        """Passes made so far (fewer than calls when calls shared them)."""

    async def publish_many(self, messages: Sequence[OutboxMessage]) -> list[Published]:
        """Publish ``messages`` with this turn's other callers; raises BrokerUnavailableError."""
        loop = asyncio.get_running_loop()
        answer: asyncio.Future[list[Published]] = loop.create_future()
        if not self._waiting:
            loop.call_soon(self._start_pass)  # after every task that is ready in this turn ran
        self._waiting.append((messages, tracing.current_context(), answer))
        return await answer

    def _start_pass(self) -> None:
        batch, self._waiting = self._waiting, []
        task = asyncio.create_task(self._pass(batch), name="bus-publish-together")
        self._passes.add(task)
        task.add_done_callback(self._passes.discard)

    async def _pass(self, batch: list[_Waiting]) -> None:
        self.passes += 1
        outcomes: list[list[Published] | BrokerUnavailableError]
        try:
            outcomes = await self._producer.publish_together([(messages, ctx) for messages, ctx, _ in batch])
        except asyncio.CancelledError:  # the process is stopping: the callers must not wait forever
            _answer(batch, [BrokerUnavailableError("publishing stopped") for _ in batch])
            raise
        except Exception as exc:  # a bug, not the broker: every caller hears it rather than hanging
            outcomes = [BrokerUnavailableError(f"publish failed: {type(exc).__name__}: {exc}") for _ in batch]
        _answer(batch, outcomes)


def _answer(batch: list[_Waiting], outcomes: Sequence[list[Published] | BrokerUnavailableError]) -> None:
    for (_, _, answer), outcome in zip(batch, outcomes, strict=True):
        if answer.done():  # the caller was cancelled; its records may be on the bus (ids dedupe)
            continue
        if isinstance(outcome, BrokerUnavailableError):
            answer.set_exception(outcome)
        else:
            answer.set_result(outcome)
