"""Persisting and replaying the turns of a branch loop (table ``agent_turns``).

The observation itself is an artifact (content-addressed, redacted); the row keeps its ref
with the decision, so a resumed loop rebuilds exactly the history the policy saw. A model
call's provider, request fingerprint and reply ride in the proposal under ``_`` keys.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncConnection

from ira.agents.model import ModelCall, Observation, Turn
from ira.agents.tables import agent_turns
from ira.core.errors import StaleEpochError
from ira.core.run import Claim
from ira.runtime.store import artifacts
from ira.runtime.store.new_rows import InsertNew

OBSERVATION_MEDIA_TYPE = "application/vnd.ira.observation+json"
RAW_MEDIA_TYPE = "application/json"

_t = agent_turns.c


async def load_turns(conn: AsyncConnection, claim: Claim) -> list[Turn]:
    """The committed turns of the claimed step, in order (whoever committed them)."""
    tenant_id = claim.tenant_id
    rows = (await conn.execute(select(agent_turns).where(
        _t.tenant_id == tenant_id, _t.run_id == claim.run_id, _t.step_id == claim.step_id).order_by(_t.turn))).all()
    turns = []
    for row in rows:
        observation = None
        if row.observation_ref:
            _, body = await artifacts.get_artifact(conn, tenant_id, row.observation_ref)
            observation = Observation.model_validate_json(body)
        call = None
        if row.model:
            call = ModelCall(provider=row.proposal.get("_provider", ""), model=row.model,
                             prompt_hash=row.prompt_hash or "", input_tokens=row.input_tokens,
                             output_tokens=row.output_tokens, cost_micros=row.cost_micros,
                             fingerprint=row.proposal.get("_fingerprint"), reply=row.proposal.get("_reply"),
                             error=row.proposal.get("_error"))
        decision = {k: v for k, v in row.proposal.items() if not k.startswith("_")}
        turns.append(Turn.model_validate({"turn": row.turn, "decision": decision, "model_call": call,
                                          "observation": observation}))
    return turns


async def store_observation(
    conn: AsyncConnection, tenant_id: str, observation: Observation, *, max_bytes: int, at: datetime
) -> str:
    body = observation.model_dump_json().encode()
    ref = await artifacts.put_artifact(conn, tenant_id, body, media_type=OBSERVATION_MEDIA_TYPE,
                                       max_bytes=max_bytes, at=at)
    return ref.ref


async def insert_turn(
    conn: AsyncConnection, claim: Claim, turn: Turn, *, observation_ref: str | None, at: datetime
) -> None:
    """Write the turn once; a second writer of the same turn lost the step (StaleEpochError).

    ``INSERT .. ON CONFLICT DO NOTHING RETURNING`` finds the second writer without a database
    error, so without a savepoint around it.
    """
    call = turn.model_call
    proposal = turn.decision.model_dump(mode="json") | (_call_extras(call) if call else {})
    inserted = (await conn.execute(_INSERT_TURN.on(conn), {
        "tenant_id": claim.tenant_id, "run_id": claim.run_id, "step_id": claim.step_id, "turn": turn.turn,
        "attempt_id": claim.attempt_id, "owner_epoch": claim.owner_epoch, "proposal": proposal,
        "observation_ref": observation_ref, "model": call.model if call else None,
        "prompt_hash": call.prompt_hash if call else None, "input_tokens": call.input_tokens if call else 0,
        "output_tokens": call.output_tokens if call else 0, "cost_micros": call.cost_micros if call else 0,
        "created_at": at})).first()
    if inserted is None:
        raise StaleEpochError(f"turn {turn.turn} of {claim.run_id}/{claim.step_id} was committed by another owner")


_INSERT_TURN = InsertNew(agent_turns, _t.turn)


def _call_extras(call: ModelCall) -> dict[str, object]:
    """Kept beside the decision (keys starting with ``_``): the provider, and for ``ira record``
    the request's fingerprint and the reply (or the provider's error)."""
    extras: dict[str, object] = {"_provider": call.provider}
    if call.fingerprint is not None and call.reply is not None:
        extras |= {"_fingerprint": call.fingerprint, "_reply": call.reply}
    if call.fingerprint is not None and call.error is not None:
        extras |= {"_fingerprint": call.fingerprint, "_error": call.error}
    return extras
