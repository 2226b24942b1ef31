"""What people do to a run besides approving: cancel it, edit its draft."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy.ext.asyncio import AsyncConnection

from ira.coordinator import gate
from ira.coordinator.config import WorkflowConfig
from ira.coordinator.ending import end_run
from ira.coordinator.facts import lock_run
from ira.core.errors import DomainError, IllegalTransitionError
from ira.core.operation import Approval
from ira.core.run import Run
from ira.core.states import TERMINAL_RUN_STATES, RunState


async def cancel_run(
    conn: AsyncConnection, tenant_id: str, run_id: str, *, principal: str, reason: str | None,
    config: WorkflowConfig, at: datetime,
) -> Run:
    """CANCELLED for good: no new claims, running branches revoked, approvals void, in-flight
    Operations kept under reconciliation. Cancelling a cancelled run is a no-op."""
    run = await lock_run(conn, tenant_id, run_id)
    if run.state == RunState.CANCELLED:
        return run
    if run.state in TERMINAL_RUN_STATES:
        raise IllegalTransitionError("run", run.state.value, RunState.CANCELLED.value)
    return await end_run(conn, run, state=RunState.CANCELLED, outcome="cancelled", config=config, at=at,
                         detail={"by": principal, "reason": reason})


async def edit_draft(
    conn: AsyncConnection, tenant_id: str, run_id: str, *, title: str | None, body: str | None, principal: str,
    config: WorkflowConfig, at: datetime,
) -> Approval:
    """A human edit is a new draft version; it needs (and gets) a new approval."""
    run = await lock_run(conn, tenant_id, run_id)
    edit = {k: v for k, v in (("title", title), ("body", body)) if v is not None}
    approval = await gate.revise(conn, run, reason="draft_changed", config=config, at=at, edit=edit,
                                 note=f"edited by {principal}")
    if approval is None:
        raise DomainError(f"run {run_id} is not waiting for approval of a draft")
    return approval
