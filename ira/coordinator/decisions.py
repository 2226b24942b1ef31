"""The one way a person's decision on an approval is recorded: the API, the dashboard and
Slack all come through :func:`record_decision`, so each is judged by the same rules
(:mod:`ira.coordinator.approval`) in the same transaction shape (:func:`gate.decide`).

``action_key`` makes a channel's delivery of one click idempotent: Slack retries an
interaction it got no timely answer for, and the inbox row, written in the decision's
transaction, turns the retry into the decision already recorded.
"""

from __future__ import annotations

import hashlib
import logging

from ira.coordinator import gate, records, ticket
from ira.coordinator.approval import Choice, Judgement, Shown, Verdict
from ira.coordinator.chain import NotHere
from ira.coordinator.deps import Deps
from ira.core.errors import ConcurrentUpdateError
from ira.core.operation import Approval
from ira.runtime.bus.inbox import record_inbox_many

log = logging.getLogger(__name__)
DECISION_TRIES = 5
ACTIONS_CONSUMER = "approval-actions"
"""The inbox consumer name under which channel action ids are remembered."""
_MAX_KEY = 200


async def record_decision(
    deps: Deps, *, tenant_id: str, approval_id: str, choice: Choice, principal: str, roles: frozenset[str],
    reason: str | None = None, action_key: str | None = None, shown: Shown | None = None,
) -> tuple[Approval, Judgement]:
    """One transaction per try; a concurrent click that won makes this one a duplicate or a refusal.
    ``shown``: the draft binding the decider's button carried (chat); it must match the approval's.

    An approval that readies ``create_ticket`` for this process's intake also records the
    ticket's intent and permit in its transaction (``ticket.prepare_with_decision``); should that
    part fail, the decision is made once more without it."""
    with_intent, conflicts = True, 0
    while True:
        try:
            async with deps.db.transaction() as conn:
                if action_key is not None and not await record_inbox_many(
                        conn, consumer=ACTIONS_CONSUMER, keys=[(tenant_id, _fit(action_key))], at=deps.clock.now()):
                    approval = await records.get_approval(conn, tenant_id, approval_id)
                    return approval, Judgement(verdict=Verdict.DUPLICATE, message="this action was recorded before")
                decided = await gate.decide_in_view(
                    conn, tenant_id, approval_id, choice=choice, principal=principal, roles=roles, reason=reason,
                    config=deps.config, at=deps.clock.now(), shown=shown)
                if with_intent and decided.judgement.verdict == Verdict.APPLY and choice == Choice.APPROVE:
                    await ticket.prepare_with_decision(deps, conn, tenant_id, decided.approval.run_id,
                                                       view=decided.view)
                return decided.approval, decided.judgement
        except NotHere as failed:  # at most once: the next try makes no intent
            log.warning("approval %s: the ticket's intent failed in the decision's transaction; the decision "
                        "commits alone", approval_id, exc_info=failed.__cause__)
            with_intent = False
        except ConcurrentUpdateError:
            conflicts += 1
            if conflicts == DECISION_TRIES:
                raise


def _fit(key: str) -> str:
    return key if len(key) <= _MAX_KEY else hashlib.sha256(key.encode()).hexdigest()
