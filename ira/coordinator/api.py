"""The coordinator's commands over HTTP (DESIGN.md §10): cancel a run, decide an approval,
close a manual repair with a note, draft anyway or retry the failed branches after a failed
required branch.

Every read (runs, events, report, draft, tickets) is served by the read model
(``ira.readmodel`` through ``ira.dashboard.api``); this module only changes things. Every
command is scoped by the caller's tenant (from the bearer token)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends
from fastapi.responses import JSONResponse
from pydantic import Field

from ira.coordinator import control
from ira.coordinator.approval import Choice, RefusalCode, Verdict
from ira.coordinator.decisions import record_decision
from ira.coordinator.deps import Deps
from ira.coordinator.reconcile import close_with_note
from ira.core.model import Model
from ira.runtime.auth import Principal, authenticated_router, principal_for, requires
from ira.runtime.bounds import MAX_ID_LENGTH, MAX_REASON_LENGTH, IdPath
from ira.runtime.http import error_response
from ira.runtime.session import Sessions
from ira.runtime.settings import Settings


class DecisionBody(Model):
    decision: Choice
    reason: str | None = Field(default=None, max_length=MAX_REASON_LENGTH)


class CancelBody(Model):
    reason: str | None = Field(default=None, max_length=MAX_REASON_LENGTH)


class NoteBody(Model):
    note: str | None = Field(default=None, max_length=MAX_REASON_LENGTH)


class CloseRepairBody(Model):
    note: str = Field(min_length=3, max_length=MAX_REASON_LENGTH)
    """What the person found (kept as the evidence artifact the close requires)."""
    external_ref: str | None = Field(default=None, max_length=MAX_ID_LENGTH)
    """The ticket's key if it does exist (the Operation becomes confirmed), else None (not created)."""


APPROVER = requires("approver")
"""Cancel and the work-item actions: a viewer is refused before the body is read. (A decision
is judged by its approval's own required role, and the refusal is logged on the run.)"""


def build_router(settings: Settings, deps: Deps) -> APIRouter:
    """``POST /v1/runs/{id}/cancel``, ``/v1/approvals/{id}/decision``, ``/v1/work-items/{id}/close``."""
    sessions = Sessions(deps.db, clock=deps.clock, ttl=settings.http.session_ttl)
    authenticate = principal_for(settings, sessions)
    router = authenticated_router(authenticate, prefix="/v1", tags=["commands"])
    who = Depends(authenticate)
    _actions(router, deps, who)
    return router


def _actions(router: APIRouter, deps: Deps, who: Any) -> None:
    @router.post("/runs/{run_id}/cancel", status_code=202, openapi_extra=APPROVER)
    async def cancel(run_id: IdPath, body: CancelBody | None = None, caller: Principal = who) -> dict[str, Any]:
        """Stop the run for good; in-flight external actions stay under reconciliation."""
        caller.require("approver")
        async with deps.db.transaction() as conn:
            run = await control.cancel_run(conn, caller.tenant_id, run_id, principal=caller.name,
                                           reason=body.reason if body else None, config=deps.config,
                                           at=deps.clock.now())
        return {"run_id": run.run_id, "state": run.state.value, "outcome": run.outcome}

    @router.post("/work-items/{work_item_id}/close", openapi_extra=APPROVER)
    async def close_repair(work_item_id: IdPath, body: CloseRepairBody, caller: Principal = who) -> dict[str, Any]:
        """Settle a manual repair with a note; the run resumes from the fact it states."""
        caller.require("approver")
        op, evidence_ref = await close_with_note(deps, caller.tenant_id, work_item_id, note=body.note,
                                                 external_ref=body.external_ref, principal=caller.name)
        return {"work_item_id": work_item_id, "operation_id": op.operation_id, "fact_state": op.fact_state.value,
                "evidence_ref": evidence_ref}

    @router.post("/work-items/{work_item_id}/draft-anyway", openapi_extra=APPROVER)
    async def draft_anyway(work_item_id: IdPath, body: NoteBody, caller: Principal = who) -> dict[str, Any]:
        """After a required branch failed: draft the ticket anyway, the missing evidence stated."""
        caller.require("approver")
        async with deps.db.transaction() as conn:
            run = await control.draft_anyway(conn, caller.tenant_id, work_item_id, principal=caller.name,
                                             note=body.note, config=deps.config, at=deps.clock.now())
        return {"work_item_id": work_item_id, "run_id": run.run_id, "state": run.state.value}

    @router.post("/work-items/{work_item_id}/retry", openapi_extra=APPROVER)
    async def retry_branches(work_item_id: IdPath, body: NoteBody, caller: Principal = who) -> dict[str, Any]:
        """After a required branch failed: run each failed branch again (a new attempt, a fresh
        slice and deadline); the join waits for them and judges each branch by its latest attempt."""
        caller.require("approver")
        async with deps.db.transaction() as conn:
            run = await control.retry_failed_branches(conn, caller.tenant_id, work_item_id, principal=caller.name,
                                                      note=body.note, config=deps.config, at=deps.clock.now())
        return {"work_item_id": work_item_id, "run_id": run.run_id, "state": run.state.value}

    @router.post("/approvals/{approval_id}/decision", response_model=None)
    async def decide(approval_id: IdPath, body: DecisionBody, caller: Principal = who) -> dict[str, Any] | JSONResponse:
        """Approve or reject; 409 with the reason when the decision cannot apply."""
        return await _decide(deps, caller, approval_id, body=body)


async def _decide(deps: Deps, caller: Principal, approval_id: str, *,
                  body: DecisionBody) -> dict[str, Any] | JSONResponse:
    approval, judgement = await record_decision(
        deps, tenant_id=caller.tenant_id, approval_id=approval_id, choice=body.decision, principal=caller.name,
        roles=caller.roles, reason=body.reason)
    if judgement.verdict == Verdict.REFUSE:
        # the refusal is in the run's log either way; a missing role is the caller's, like cancel's
        status = 403 if judgement.code == RefusalCode.ROLE_MISSING else 409
        return error_response(status, str(judgement.code), judgement.message)
    return {"approval_id": approval.approval_id, "run_id": approval.run_id, "state": approval.state.value,
            "decided_by": approval.decided_by, "decided_at": approval.decided_at,
            "duplicate": judgement.verdict == Verdict.DUPLICATE}
