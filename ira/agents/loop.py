"""The bounded loop of one branch: decide -> validate -> judge -> reserve -> call -> settle -> observe.

Each turn commits in one transaction (fence on the step's epoch, the observation artifacts,
the ``agent_turns`` row, the budget settled with real usage, the turn's events), so a crash
loses at most the turn in flight, and a new owner replays committed turns instead of asking
the policy again. The loop stops, with a machine-readable reason, when the policy finishes
(``done``), a budget dimension of the slice runs out (``budget_exhausted``, also the turn
cap), the binding's deadline passes (``deadline``), the same action meets the same
observation N times (``no_progress``), proposals keep being denied (``denied``), or the
policy fails (``error``). Tool failures are observations, never exceptions.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import timedelta

from opentelemetry import trace
from opentelemetry.trace import Status, StatusCode, Tracer

from ira.agents import execute
from ira.agents.ledger import SliceLedger, TurnHolds
from ira.agents.model import BranchTask, Finish, Invalid, ModelCall, Observation, ToolProposal, Turn
from ira.agents.policies import Policy
from ira.agents.policies.llm import answered_by
from ira.agents.redact import Redactor
from ira.agents.tools import bound_tools
from ira.agents.turns import insert_turn, load_turns, store_observation
from ira.connectors.bound import ConnectorSet
from ira.core.budget import BudgetDimension as Dim
from ira.core.clock import Clock
from ira.core.commit import EventDraft, Fence
from ira.core.errors import ArtifactTooLargeError, BudgetExhaustedError, PlatformError
from ira.core.events import RunEventType
from ira.core.investigation import StopReason
from ira.core.run import Claim
from ira.core.states import TERMINAL_RUN_STATES
from ira.runtime.store import artifacts, budget, runs, steps
from ira.runtime.store.database import Database

TURN_EVENT = RunEventType.AGENT_TURN
DENIED_EVENT = RunEventType.PROPOSAL_DENIED


class BranchCancelledError(Exception):
    """The run ended (cancelled, failed) while the branch worked: stop without a result."""


@dataclass(frozen=True)
class LoopLimits:
    max_turns: int = 28
    no_progress_repeats: int = 3
    max_denials: int = 3
    tool_timeout: timedelta = timedelta(seconds=15)
    artifact_max_bytes: int = 1024 * 1024


@dataclass(frozen=True)
class LoopOutcome:
    stop_reason: StopReason
    turns: list[Turn]
    error: str | None = None


@dataclass
class _State:
    turns: list[Turn]
    seen: Counter[str] = field(default_factory=Counter)
    failures: Counter[str] = field(default_factory=Counter)
    """Identical failures (tool, error code, message), whatever the arguments: a source that is not
    configured or keeps refusing stops the branch after ``no_progress_repeats`` of them too."""
    denials: int = 0

    def add(self, turn: Turn) -> None:
        self.turns.append(turn)
        obs = turn.observation
        if obs is not None and obs.error_code == execute.DENIED:
            self.denials += 1
        if not isinstance(turn.decision, Finish):
            self.seen[_fingerprint(turn)] += 1
        if obs is not None and not obs.ok and obs.error_code not in (execute.DENIED, None):
            self.failures[f"{obs.tool}|{obs.error_code}|{obs.error_message}"] += 1


def _fingerprint(turn: Turn) -> str:
    d = turn.decision
    action = d.model_dump(mode="json", exclude={"call_id", "rationale"})
    material = turn.observation.fingerprint_material() if turn.observation else None
    return hashlib.sha256(json.dumps({"a": action, "o": material}, sort_keys=True).encode()).hexdigest()[:16]


@dataclass
class BranchLoop:
    db: Database
    clock: Clock
    policy: Policy
    connectors: ConnectorSet
    redactor: Redactor
    limits: LoopLimits = LoopLimits()
    tracer: Tracer = field(default_factory=lambda: trace.get_tracer("ira.agents"))

    async def run(self, task: BranchTask, claim: Claim) -> LoopOutcome:
        async with self.db.reader() as conn:
            replayed = await load_turns(conn, claim)
            budgeted = frozenset(b.dimension for b in await _balances(conn, claim))
        state, ledger = _State(turns=[]), SliceLedger(claim, budgeted)
        for turn in replayed:
            state.add(turn)
        stop = _stopped(state, self.limits)
        connectors = await self.connectors.for_binding(task.binding)
        policy = answered_by(self.policy, connectors.models)
        while stop is None:
            if len(state.turns) >= self.limits.max_turns:
                stop = StopReason.BUDGET_EXHAUSTED
                break
            attributes: dict[str, str | int] = {
                "gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": f"ira.{task.kind.value}",
                "ira.run_id": claim.run_id, "ira.step_id": claim.step_id, "ira.turn": len(state.turns) + 1}
            with self.tracer.start_as_current_span("agent turn", attributes=attributes) as span:
                stop = await self._turn(task, claim, ledger=ledger, state=state, connectors=connectors,
                                        policy=policy)
                if stop is not None:
                    span.set_attribute("ira.stop_reason", stop.value)
        return LoopOutcome(stop_reason=stop, turns=state.turns,
                           error="the policy failed" if stop is StopReason.ERROR else None)

    async def _turn(
        self, task: BranchTask, claim: Claim, *, ledger: SliceLedger, state: _State, connectors: ConnectorSet,
        policy: Policy,
    ) -> StopReason | None:
        if self.clock.now() >= task.binding.deadline:
            return StopReason.DEADLINE
        number, holds = len(state.turns) + 1, TurnHolds()
        estimate = policy.estimate(task, state.turns)
        wanted = {Dim.STEPS: 1} | ({Dim.MODEL_TOKENS: estimate.tokens, Dim.COST_MICROS: estimate.cost_micros}
                                   if estimate else {})
        if not await self._reserve(ledger, holds, wanted, number=number):
            return StopReason.BUDGET_EXHAUSTED
        decision, model_call = await self._decide(policy, task, state.turns)
        _charge_decision(holds, model_call)
        observation, stop = None, None
        if isinstance(decision, ToolProposal):
            observation, stop = await self._act(task, decision, ledger=ledger, holds=holds, number=number,
                                                connectors=connectors)
        elif isinstance(decision, Invalid):
            observation = execute.failure(decision.tool or "policy", decision.error_code, decision.message,
                                          retryable=decision.retryable)
        turn = Turn(turn=number, decision=decision, model_call=model_call, observation=observation)
        state.add(await self._commit(claim, turn, ledger=ledger, holds=holds))
        return stop or _stopped(state, self.limits)

    async def _decide(self, policy: Policy, task: BranchTask,
                      history: Sequence[Turn]) -> tuple[Finish | ToolProposal | Invalid, ModelCall | None]:
        left = (task.binding.deadline - self.clock.now()).total_seconds()
        try:
            async with asyncio.timeout(max(left, 0.001)):
                return await policy.decide(task, history)
        except TimeoutError:
            return Invalid(error_code="timeout", message="the policy did not answer before the deadline",
                           retryable=True), None
        except PlatformError as exc:
            return Invalid(error_code=exc.code, message=self.redactor.text(exc.message),
                           retryable=exc.retryable), None

    async def _act(
        self, task: BranchTask, proposal: ToolProposal, *, ledger: SliceLedger, holds: TurnHolds, number: int,
        connectors: ConnectorSet,
    ) -> tuple[Observation, StopReason | None]:
        checked = execute.check(task.binding, bound_tools(task.kind, task.binding), proposal)
        if isinstance(checked, Observation):
            return checked, None
        timeout = min(self.limits.tool_timeout, task.binding.deadline - self.clock.now())
        wanted = {Dim.TOOL_CALLS: 1, Dim.WALL_MS: int(timeout.total_seconds() * 1000)}
        if not await self._reserve(ledger, holds, wanted, number=number):
            exhausted = execute.failure(proposal.tool, "budget_exhausted", "no tool-call budget left", retryable=False)
            return exhausted, StopReason.BUDGET_EXHAUSTED
        with self.tracer.start_as_current_span(f"execute_tool {checked.tool.name}") as span:
            span.set_attribute("gen_ai.operation.name", "execute_tool")
            span.set_attribute("gen_ai.tool.name", checked.tool.name)
            # As proposed (a model may echo a secret): the exporter redacts span attributes.
            span.set_attribute("gen_ai.tool.call.arguments", json.dumps(proposal.args, sort_keys=True)[:2000])
            observation, elapsed = await execute.call(checked, connectors, task.binding, timeout=timeout,
                                                      redactor=self.redactor)
            span.set_attribute("ira.tool.ok", observation.ok)
            span.set_attribute("ira.tool.attempts", observation.attempts)
            span.set_attribute("ira.binding.service", task.binding.service or "")
            span.set_attribute("ira.binding.environment", task.binding.environment)
            span.set_attribute("ira.observation.partial", bool(observation.partial))
            if not observation.ok:
                span.set_attribute("error.type", observation.error_code or "error")
                span.set_status(Status(StatusCode.ERROR, observation.error_code or "error"))
        holds.use(Dim.TOOL_CALLS, observation.attempts)
        holds.use(Dim.WALL_MS, int(elapsed * 1000))
        return observation, None

    async def _reserve(self, ledger: SliceLedger, holds: TurnHolds, wanted: dict[Dim, int], *, number: int) -> bool:
        try:
            async with self.db.transaction() as conn:
                await ledger.reserve(conn, holds, wanted, turn=number, at=self.clock.now())
        except BudgetExhaustedError:
            holds.held = {d: r for d, r in holds.held.items() if d not in wanted}  # that transaction rolled back
            return False
        return True

    async def _commit(self, claim: Claim, turn: Turn, *, ledger: SliceLedger, holds: TurnHolds) -> Turn:
        """One transaction: fence, artifacts, the turn row, settled holds, events; the stored turn back."""
        now = self.clock.now()
        async with self.db.transaction() as conn:
            run_state = await steps.lock_fenced_run(conn, claim.tenant_id, claim.run_id,
                                                    Fence(step_id=claim.step_id, owner_epoch=claim.owner_epoch))
            if run_state in TERMINAL_RUN_STATES:
                raise BranchCancelledError(f"run {claim.run_id} is {run_state.value}")
            ref, turn = await self._store(conn, claim, turn)
            await insert_turn(conn, claim, turn, observation_ref=ref, at=now)
            await ledger.settle(conn, holds, at=now)
            events = _events(claim, turn, ref=ref, redactor=self.redactor)
            await runs.append_events(conn, claim.tenant_id, claim.run_id, events, at=now)
        return turn

    async def _store(self, conn, claim: Claim, turn: Turn) -> tuple[str | None, Turn]:  # type: ignore[no-untyped-def]
        obs, now, limit = turn.observation, self.clock.now(), self.limits.artifact_max_bytes
        if obs is None:
            return None, turn
        if obs.ok:
            try:
                raw = json.dumps(obs.data, sort_keys=True).encode()
                ref = await artifacts.put_artifact(conn, claim.tenant_id, raw, media_type="application/json",
                                                   max_bytes=limit, at=now)
                obs = obs.model_copy(update={"artifact_ref": ref.ref})
            except ArtifactTooLargeError:
                obs = obs.model_copy(update={"data": {}, "partial": True, "summary": obs.summary + " (too large)"})
        turn = turn.model_copy(update={"observation": obs})
        return await store_observation(conn, claim.tenant_id, obs, max_bytes=limit, at=now), turn


def _charge_decision(holds: TurnHolds, model_call: ModelCall | None) -> None:
    holds.use(Dim.STEPS, 1)
    if model_call is not None:
        holds.use(Dim.MODEL_TOKENS, model_call.input_tokens + model_call.output_tokens)
        holds.use(Dim.COST_MICROS, model_call.cost_micros)


def _stopped(state: _State, limits: LoopLimits) -> StopReason | None:
    if state.turns and isinstance(state.turns[-1].decision, Finish):
        return StopReason.DONE
    repeats = max((*state.seen.values(), *state.failures.values()), default=0)
    if repeats >= limits.no_progress_repeats:
        return StopReason.NO_PROGRESS
    if state.denials >= limits.max_denials:
        return StopReason.DENIED
    return None


def _events(claim: Claim, turn: Turn, *, ref: str | None, redactor: Redactor) -> list[EventDraft]:
    d, obs = turn.decision, turn.observation
    data = {"step_id": claim.step_id, "turn": turn.turn, "decision": d.kind,
            "tool": getattr(d, "tool", None), "ok": obs.ok if obs else None,
            "error_code": obs.error_code if obs else None, "observation_ref": ref,
            "partial": obs.partial if obs else None}
    if turn.model_call is not None:
        data |= {"model": turn.model_call.model, "prompt_hash": turn.model_call.prompt_hash,
                 "input_tokens": turn.model_call.input_tokens, "output_tokens": turn.model_call.output_tokens}
    found = [EventDraft(type=TURN_EVENT, data=data)]
    if obs is not None and obs.error_code == execute.DENIED:
        found.append(EventDraft(type=DENIED_EVENT, data={"step_id": claim.step_id, "turn": turn.turn,
                                                         "tool": getattr(d, "tool", None), "reason": obs.error_message,
                                                         "args": redactor.value(_short(getattr(d, "args", {})))}))
    return found


def _short(args: dict[str, object]) -> dict[str, object]:
    return {k: (v[:200] if isinstance(v, str) else v) for k, v in args.items()}


async def _balances(conn, claim: Claim):  # type: ignore[no-untyped-def]
    return await budget.list_balances(conn, claim.tenant_id, claim.run_id, scope=claim.step_id)
