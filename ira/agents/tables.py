"""The agents' table (migration ``0002_agents``): one row per committed turn of a branch loop.

A turn is written once (unique per tenant, run, step, turn) in the same transaction that
settles its budget and checks the writer still owns the step. A new owner replays these rows
instead of asking the policy again: committed decisions are reused, never re-sampled.
"""

from __future__ import annotations

from sqlalchemy import JSON, Column, Integer, PrimaryKeyConstraint, String, Table

from ira.runtime.store.schema import UtcDateTime, metadata

agent_turns = Table(
    "agent_turns", metadata,
    Column("tenant_id", String(64), nullable=False),
    Column("run_id", String(64), nullable=False),
    Column("step_id", String(64), nullable=False),
    Column("turn", Integer, nullable=False),
    Column("attempt_id", String(64), nullable=False),
    Column("owner_epoch", Integer, nullable=False),
    Column("proposal", JSON, nullable=False),
    Column("observation_ref", String(80)),
    Column("model", String(200)),
    Column("prompt_hash", String(80)),
    Column("input_tokens", Integer, nullable=False),
    Column("output_tokens", Integer, nullable=False),
    Column("cost_micros", Integer, nullable=False),
    Column("created_at", UtcDateTime(), nullable=False),
    PrimaryKeyConstraint("tenant_id", "run_id", "step_id", "turn"),
)
