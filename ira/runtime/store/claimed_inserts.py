"""A new run's steps that this process runs itself, inserted already claimed (and, on
PostgreSQL, a step a commit readies, claimed as it is readied: ``claims_at_promotion``).

A run's creation takes the wake-ups of its READY steps (``database.take_written``) before it
inserts them; a step whose wake-up a listener of this process took (the intake of its role,
with a free slot) and lets the store claim (``database.lease_at_insert``) goes in as the claim's
UPDATE right after would have left it: RUNNING, the taker's lease, epoch 1, its attempt
started (``steps.add_steps``). That is one UPDATE of a row the same transaction just wrote
(and, SQLite, one attempt INSERT) fewer per step, and the claim's read of the run: the
listener gets the claim, the step and the run as written. If the process dies after the
commit, the step is RUNNING under a lease nobody renews; once it ran out, the scanner wakes
it again (``steps.find_wakeable``), as for any claimed step whose owner died.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from sqlalchemy.ext.asyncio import AsyncConnection

from ira.core.commit import NewRun, OutboxMessage, StepChange
from ira.core.ids import new_id
from ira.core.run import Claim
from ira.core.states import StepState
from ira.runtime.store.database import lease_at_insert
from ira.runtime.store.steps import CLAIMABLE_RUN_STATES
from ira.runtime.wakeup import STEP_READY


def claims_at_insert(conn: AsyncConnection, new: NewRun, messages: Sequence[OutboxMessage], taken: Mapping[str, str]
                     ) -> tuple[dict[str, Claim], dict[str, str]]:
    """The claims ``new``'s READY steps are inserted with, and their wake-ups' message ids,
    both by step id: the steps whose wake-up (of ``messages``, ``taken`` as ``take_written``
    answered) a listener lets the store claim, in a run that hands out work. Each is the claim
    ``steps.claim_step_as`` would have taken right after the INSERT: epoch 1, a new attempt."""
    claims: dict[str, Claim] = {}
    woken: dict[str, str] = {}
    if not taken or new.state not in CLAIMABLE_RUN_STATES:
        return claims, woken
    ready = {s.step_id for s in new.steps if s.state == StepState.READY}
    for message in messages:
        envelope = message.envelope
        owner = taken.get(envelope.message_id)
        step_id = envelope.payload.get("step_id")
        if owner is None or envelope.type != STEP_READY or envelope.payload.get("run_id") != new.run_id \
                or step_id not in ready or step_id in claims:
            continue
        lease_until = lease_at_insert(conn, envelope.message_id)
        if lease_until is None:
            continue
        claims[step_id] = Claim(tenant_id=new.tenant_id, run_id=new.run_id, step_id=step_id, owner=owner,
                                owner_epoch=1, lease_until=lease_until, attempt_id=new_id("att"))
        woken[step_id] = envelope.message_id
    return claims, woken


def claims_at_promotion(conn: AsyncConnection, run_id: str, messages: Sequence[OutboxMessage],
                        promoted: Sequence[StepChange], taken: Mapping[str, str]) -> tuple[str, Claim] | None:
    """PostgreSQL: the step a commit's compare-and-set claims as it readies it
    (``folded_cas.folded_bump(with_claim=True)``), and its wake-up's message id: the one
    promoted step of run ``run_id`` whose wake-up (of ``messages``, ``taken`` as
    ``take_written`` answered) a listener lets the store claim. Its epoch is the row's + 1,
    known once the statement returned it (``Claim.owner_epoch`` here is 0). None when no
    promoted step or more than one is so taken (the intake's claims then take a statement
    each, as before): a commit readies one step for this process almost always (a chain's
    next step, a join, ``synthesize``)."""
    ids = {c.step_id for c in promoted}
    found: tuple[str, Claim] | None = None
    for message in messages:
        envelope = message.envelope
        owner = taken.get(envelope.message_id)
        step_id = envelope.payload.get("step_id")
        if owner is None or envelope.type != STEP_READY or envelope.payload.get("run_id") != run_id \
                or step_id not in ids:
            continue
        lease_until = lease_at_insert(conn, envelope.message_id)
        if lease_until is None:
            continue
        if found is not None:
            return None
        found = envelope.message_id, Claim(
            tenant_id=envelope.tenant_id, run_id=run_id, step_id=str(step_id), owner=owner,
            owner_epoch=0, lease_until=lease_until, attempt_id=new_id("att"))
    return found
