"""Scripted investigators: what an agent must do with a branch step, with canned evidence.

They honour the binding (only its tools, only its budget slice) and finish the step the way
the agents role must: store a BranchResult artifact, close the slice and commit the step
DONE or FAILED, fenced by the claim, in one transaction that reads the run row locked (three
branches finishing at once would otherwise lose the compare-and-set on PostgreSQL). Behaviours per branch:

* ``ok``      evidence from the binding's first tool, one hypothesis citing it
* ``fail``    a FAILED step with an error result
* ``hang``    never finishes on its own (until cancelled, or ``release`` is set)
* ``deny``    first proposes a tool outside the binding: refused, the denial recorded as an
              event; then proceeds like ``ok``
* ``outside`` claims evidence from a tool outside the binding (the join must refuse it)
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass, field

from ira.coordinator.facts import lock_run
from ira.core.budget import BudgetDimension
from ira.core.clock import Clock
from ira.core.commit import EventDraft, Fence, RunCommit, StepChange
from ira.core.events import RunEventType
from ira.core.investigation import BranchBinding, BranchKind, BranchResult, Evidence, Hypothesis, StopReason
from ira.core.states import StepState
from ira.runtime.dispatch import StepContext, StepDispatcher, StepHandler
from ira.runtime.store import budget, runs
from ira.runtime.store.artifacts import put_artifact
from ira.runtime.store.database import Database

OUTSIDE_TOOL = "kubectl.rollout_restart"


@dataclass
class ScriptedInvestigators:
    db: Database
    clock: Clock
    behaviour: Mapping[str, str] = field(default_factory=dict)
    release: asyncio.Event = field(default_factory=asyncio.Event)
    hanging: set[str] = field(default_factory=set)
    finished: list[tuple[str, int]] = field(default_factory=list)

    def handlers(self) -> dict[str, StepHandler]:
        return {kind.value: self.handle for kind in BranchKind}

    def dispatcher(self, *, owner: str = "agents-test", lease_seconds: float = 30) -> StepDispatcher:
        from datetime import timedelta

        return StepDispatcher(db=self.db, clock=self.clock, handlers=self.handlers(), owner=owner,
                              lease=timedelta(seconds=lease_seconds))

    async def handle(self, ctx: StepContext) -> None:
        kind = ctx.step.kind
        binding = BranchBinding.model_validate(ctx.step.binding)
        mode = self.behaviour.get(kind, "ok")
        if mode == "hang":
            self.hanging.add(f"{ctx.claim.run_id}/{kind}")
            try:
                await self.release.wait()
            finally:
                self.hanging.discard(f"{ctx.claim.run_id}/{kind}")
            return
        if mode == "deny":
            await self._deny(ctx, binding)
        tool = OUTSIDE_TOOL if mode == "outside" else binding.tools[0]
        await self._use_tool(ctx, tool)
        result = _result(kind, binding, tool) if mode != "fail" else BranchResult(
            branch=BranchKind(kind), stop_reason=StopReason.ERROR, error=f"{kind} backend unreachable")
        await self._finish(ctx, result, StepState.FAILED if mode == "fail" else StepState.DONE)

    async def _deny(self, ctx: StepContext, binding: BranchBinding) -> None:
        """A proposal outside the binding is judged before any call: refused and recorded."""
        assert OUTSIDE_TOOL not in binding.tools
        async with self.db.transaction() as conn:
            run = await lock_run(conn, ctx.claim.tenant_id, ctx.claim.run_id)
            await runs.commit(conn, RunCommit(
                tenant_id=run.tenant_id, run_id=run.run_id, expected_version=run.state_version,
                fence=Fence(step_id=ctx.claim.step_id, owner_epoch=ctx.claim.owner_epoch),
                events=(EventDraft(type=RunEventType.PROPOSAL_DENIED, data={
                    "step_id": ctx.claim.step_id, "tool": OUTSIDE_TOOL, "reason": "tool not in the branch binding",
                    "allowed": list(binding.tools)}),)), at=self.clock.now())

    async def _use_tool(self, ctx: StepContext, tool: str) -> None:
        """One loop step and one tool call from the branch's own slice, reserved then settled."""
        c = ctx.claim
        rid = f"{c.run_id}:{c.step_id}:{c.owner_epoch}:{tool}"
        async with self.db.transaction() as conn:
            for dim in (BudgetDimension.STEPS, BudgetDimension.TOOL_CALLS):
                await budget.reserve(conn, c.tenant_id, c.run_id, dim, 1, reservation_id=f"{rid}:{dim.value}",
                                     scope=c.step_id, at=self.clock.now())
                await budget.settle(conn, c.tenant_id, f"{rid}:{dim.value}", used=1, at=self.clock.now())

    async def _finish(self, ctx: StepContext, result: BranchResult, state: StepState) -> None:
        c, now = ctx.claim, self.clock.now()
        async with self.db.transaction() as conn:
            ref = await put_artifact(conn, c.tenant_id, result.model_dump_json().encode(),
                                     media_type="application/json", max_bytes=1 << 20, at=now)
            await budget.close_slice(conn, c.tenant_id, c.run_id, c.step_id, at=now)
            run = await lock_run(conn, c.tenant_id, c.run_id)
            await runs.commit(conn, RunCommit(
                tenant_id=c.tenant_id, run_id=c.run_id, expected_version=run.state_version,
                fence=Fence(step_id=c.step_id, owner_epoch=c.owner_epoch),
                steps=(StepChange(step_id=c.step_id, state=state, result_ref=ref.ref),),
                events=(EventDraft(type=RunEventType.BRANCH_FINISHED, data={"step_id": c.step_id,
                    "state": state.value}),)),
                at=now)
        self.finished.append((c.step_id, c.owner_epoch))


def _result(kind: str, binding: BranchBinding, tool: str) -> BranchResult:
    evidence = Evidence(evidence_id=f"{kind}-e1", source=tool, summary=f"{kind}: p99 latency tripled after deploy",
                        query=f"{kind} query for {binding.service}", window_start=binding.window_start,
                        window_end=binding.window_end)
    hypothesis = Hypothesis(statement=f"the deploy at the window start caused it ({kind})", confidence=0.6,
                            evidence_ids=(evidence.evidence_id,), unverified=("no rollback comparison",))
    return BranchResult(branch=BranchKind(kind), stop_reason=StopReason.DONE, evidence=(evidence,),
                        hypotheses=(hypothesis,), usage={BudgetDimension.TOOL_CALLS: 1})
