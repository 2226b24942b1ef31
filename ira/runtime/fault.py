"""Fault points: named places where a test can make this process die on purpose.

Fault tests must kill the real process at a chosen point (not raise an exception that a
handler could catch). A point is armed only by configuration (``IRA_FAULTS=a,b`` or
``faults:`` in ira.yaml); unarmed, ``hit`` costs a set lookup.

Every point, in one place (the process dies after the first and before the second; the
constant that names a point sits beside its ``hit``):

* ``ingest.after_commit`` (``ira.sources.accept.AFTER_COMMIT``): a webhook request's events
  are committed to the outbox / its 202 is sent.
* ``relay.after_publish`` (``ira.runtime.relay.AFTER_PUBLISH``): the broker acknowledged a
  batch / the batch is marked sent.
* ``consumer.<name>.after_apply`` (``ira.runtime.bus.consumer.after_apply``): the handler's
  transaction (inbox row and effect) committed / the Kafka offset is committed. ``<name>``
  is the consumer's (inbox) name: ``triage``, ``coordinator``, ``coordinator-steps``,
  ``notifier``, ``agents-steps``.
* ``ticket.after_intent`` / ``ticket.after_submit`` / ``ticket.after_receipt`` /
  ``ticket.after_finish`` (``ira.coordinator.ticket``): the Operation's INTENT_RECORDED (with
  its SUBMITTED permit, one commit, when it may be sent) / SUBMITTED / CONFIRMED_SUCCESS (with
  the step's DONE, one commit, for its owner; and C6 with them where the receipt's transaction
  completed the run) / the step's DONE is committed / the next move is made.
* ``ticket.after_create`` (``ira.connectors.tickets.fault.AFTER_CREATE``): the ticket system
  created the ticket / its receipt is stored.
* ``run.after_complete`` (``ira.coordinator.verify.AFTER_COMPLETE``): the verifier's
  COMPLETED (C6) with its delivery outbox is committed / any delivery is attempted.
* ``worker.before_ready`` (``ira.runtime.process.WORKER_BEFORE_READY``): an ``ira worker``
  opened its platform / it is ready (``ira dev`` must then stop, not restart it forever).
* ``intake.after_claimed_insert`` (``ira.runtime.intake.AFTER_CLAIMED_INSERT``): a commit that
  inserted steps already claimed by this process (a new run's branches, ``store.claimed_inserts``)
  committed / their handlers start: the steps are RUNNING under a lease nobody renews.
* ``delivery.after_send`` (``ira.notifier.worker.AFTER_SEND``): the channel answered /
  the receipt is stored.

``tests/faults`` (``make faults``) arms each of them in real processes and checks what held.
"""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Iterable


class FaultPoints:
    """The armed fault points of this process."""

    def __init__(self, armed: Iterable[str] = ()) -> None:
        self._armed = frozenset(armed)

    def hit(self, name: str) -> None:
        """Die at once (SIGKILL: no cleanup, no flush) if ``name`` is armed."""
        if name in self._armed:
            print(f"fault point {name} hit: killing pid {os.getpid()}", file=sys.stderr, flush=True)
            os.kill(os.getpid(), signal.SIGKILL)
