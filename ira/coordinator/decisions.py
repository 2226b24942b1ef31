"""The one way a person's decision on an approval is recorded: the API, the dashboard and
Slack all come through :func:`record_decision`, so each is judged by the same rules
(:mod:`ira.coordinator.approval`) in the same transaction shape (:func:`gate.decide`).

``action_key`` makes a channel's delivery of one click idempotent: Slack retries an
interaction it got no timely answer for, and the inbox row, written in the decision's
transaction, turns the retry into the decision already recorded.
"""

from __future__ import annotations

import hashlib

from ira.coordinator import gate, records
from ira.coordinator.approval import Choice, Judgement, Shown, Verdict
from ira.coordinator.deps import Deps
from ira.core.errors import ConcurrentUpdateError
from ira.core.operation import Approval
from ira.runtime.bus.inbox import record_inbox_many

DECISION_TRIES = 5
ACTIONS_CONSUMER = "approval-actions"
"""The inbox consumer name under which channel action ids are remembered."""
_MAX_KEY = 200


async def record_decision(
    deps: Deps, *, tenant_id: str, approval_id: str, choice: Choice, principal: str, roles: frozenset[str],
    reason: str | None = None, action_key: str | None = None, shown: Shown | None = None,
) -> tuple[Approval, Judgement]:
    """One transaction per try; a concurrent click that won makes this one a duplicate or a refusal.
    ``shown``: the draft binding the decider's button carried (chat); it must match the approval's."""
    for attempt in range(DECISION_TRIES):
        try:
            async with deps.db.transaction() as conn:
                if action_key is not None and not await record_inbox_many(
                        conn, consumer=ACTIONS_CONSUMER, keys=[(tenant_id, _fit(action_key))], at=deps.clock.now()):
                    approval = await records.get_approval(conn, tenant_id, approval_id)
                    return approval, Judgement(verdict=Verdict.DUPLICATE, message="this action was recorded before")
                return await gate.decide(conn, tenant_id, approval_id, choice=choice, principal=principal,
                                         roles=roles, reason=reason, config=deps.config, at=deps.clock.now(),
                                         shown=shown)
        except ConcurrentUpdateError:
            if attempt == DECISION_TRIES - 1:
                raise
    raise AssertionError("unreachable: the last try returns or raises")


def _fit(key: str) -> str:
    return key if len(key) <= _MAX_KEY else hashlib.sha256(key.encode()).hexdigest()
