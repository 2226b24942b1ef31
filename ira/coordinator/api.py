"""The run, approval and ticket API (DESIGN.md §10). Every query is scoped by the caller's
tenant (from the bearer token), so no request can name another tenant's objects."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query
from fastapi.responses import JSONResponse

from ira.connectors.tickets.builtin import BuiltinTicketSystem
from ira.coordinator import control, gate, views
from ira.coordinator.approval import Choice, Verdict
from ira.coordinator.deps import Deps
from ira.core.errors import ConcurrentUpdateError
from ira.core.model import Model
from ira.core.states import RunState, WaitKind
from ira.runtime.auth import Principal, principal_for
from ira.runtime.http import error_response
from ira.runtime.settings import Settings
from ira.runtime.store import runs

_DECISION_TRIES = 5


class DecisionBody(Model):
    decision: Choice
    reason: str | None = None


class CancelBody(Model):
    reason: str | None = None


def build_router(settings: Settings, deps: Deps, *, tickets: BuiltinTicketSystem | None = None) -> APIRouter:
    """``/v1/runs...``, ``/v1/approvals/{id}/decision`` and ``/v1/tickets``."""
    router = APIRouter(prefix="/v1", tags=["runs"])
    who = Depends(principal_for(settings))
    _reads(router, deps, who)
    _actions(router, deps, who, tickets=tickets)
    return router


def _reads(router: APIRouter, deps: Deps, who: Any) -> None:
    @router.get("/runs", response_model=views.RunList)
    async def list_runs(*, caller: Principal = who, state: RunState | None = None, wait_kind: WaitKind | None = None,
                        limit: Annotated[int, Query(ge=1, le=500)] = 50) -> views.RunList:
        """The tenant's runs, newest first, optionally by state and wait kind."""
        async with deps.db.reader() as conn:
            return await views.list_runs(conn, caller.tenant_id, state=state, wait_kind=wait_kind, limit=limit)

    @router.get("/runs/{run_id}", response_model=views.RunDetail)
    async def get_run(run_id: str, caller: Principal = who) -> views.RunDetail:
        """The run with its steps, approvals, operations, budget and deliveries."""
        async with deps.db.reader() as conn:
            return await views.run_detail(conn, caller.tenant_id, run_id)

    @router.get("/runs/{run_id}/events", response_model=views.EventList)
    async def list_events(run_id: str, *, caller: Principal = who, after: Annotated[int, Query(ge=0)] = 0,
                          limit: Annotated[int, Query(ge=1, le=1000)] = 1000) -> views.EventList:
        """The run's log after ``run_seq`` ``after``: numbered 1..N without gaps."""
        async with deps.db.reader() as conn:
            await runs.get_run(conn, caller.tenant_id, run_id)
            found = await runs.list_events(conn, caller.tenant_id, run_id, after=after, limit=limit)
        return views.EventList(events=tuple(views.event_view(e) for e in found))


def _actions(router: APIRouter, deps: Deps, who: Any, *, tickets: BuiltinTicketSystem | None) -> None:
    @router.post("/runs/{run_id}/cancel", status_code=202)
    async def cancel(run_id: str, body: CancelBody | None = None, caller: Principal = who) -> dict[str, Any]:
        """Stop the run for good; in-flight external actions stay under reconciliation."""
        caller.require("approver")
        async with deps.db.transaction() as conn:
            run = await control.cancel_run(conn, caller.tenant_id, run_id, principal=caller.name,
                                           reason=body.reason if body else None, config=deps.config,
                                           at=deps.clock.now())
        return {"run_id": run.run_id, "state": run.state.value, "outcome": run.outcome}

    @router.post("/approvals/{approval_id}/decision", response_model=None)
    async def decide(approval_id: str, body: DecisionBody, caller: Principal = who) -> dict[str, Any] | JSONResponse:
        """Approve or reject; 409 with the reason when the decision cannot apply."""
        return await _decide(deps, caller, approval_id, body=body)

    @router.get("/tickets")
    async def list_tickets(caller: Principal = who, limit: Annotated[int, Query(ge=1, le=500)] = 100) -> dict[str, Any]:
        """Tickets of the builtin ticket service, newest first."""
        found = await tickets.list_tickets(caller.tenant_id, limit=limit) if tickets else []
        return {"tickets": [t.model_dump(mode="json") for t in found]}


async def _decide(deps: Deps, caller: Principal, approval_id: str, *,
                  body: DecisionBody) -> dict[str, Any] | JSONResponse:
    """One transaction per try; a concurrent click that won makes this one a duplicate or a 409."""
    for attempt in range(_DECISION_TRIES):
        try:
            async with deps.db.transaction() as conn:
                approval, judgement = await gate.decide(
                    conn, caller.tenant_id, approval_id, choice=body.decision, principal=caller.name,
                    roles=caller.roles, reason=body.reason, config=deps.config, at=deps.clock.now())
            break
        except ConcurrentUpdateError:
            if attempt == _DECISION_TRIES - 1:
                raise
    if judgement.verdict == Verdict.REFUSE:
        return error_response(409, str(judgement.code), judgement.message)
    return {"approval_id": approval.approval_id, "run_id": approval.run_id, "state": approval.state.value,
            "decided_by": approval.decided_by, "decided_at": approval.decided_at,
            "duplicate": judgement.verdict == Verdict.DUPLICATE}
