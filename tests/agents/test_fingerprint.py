"""Model calls of a replay: the request fingerprint is what a replay reproduces (not its times, ids,
environment, labels or recording), and a recorded reply is served moved into the replay's window."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest

from ira.agents.model import BranchTask, Observation, ToolProposal, Turn
from ira.agents.policies.fingerprint import request_fingerprint
from ira.agents.policies.llm import LlmPolicy, answered_by
from ira.agents.policies.rules import rule_policy
from ira.connectors.recorded_models import ModelNotRecordedError, RecordedModelCall, RecordedModels
from ira.core.investigation import BranchKind
from ira.core.llm import ChatReply, ToolCall
from ira.runtime.settings.agents import AgentsSettings, LlmProviderSettings
from tests.agents import fixtures as fx
from tests.agents.scenario import binding

POLICY = LlmPolicy(client=None, provider=LlmProviderSettings(name="fake", kind="openai", model="gpt-fake"))  # type: ignore[arg-type]
LATER = timedelta(days=2, minutes=3, seconds=7)


def task(*, shift: timedelta = timedelta(0), environment: str = "prod", incident: str = "inc_" + "a" * 32,
         labels: dict[str, str] | None = None) -> BranchTask:
    b = binding(BranchKind.LOGS, fx.START + shift, fx.END + shift, labels=labels or {"team": "payments"})
    b = b.model_copy(update={"environment": environment, "incident_id": incident,
                             "alert_started_at": fx.SPLIT + shift})
    return BranchTask(kind=BranchKind.LOGS, binding=b, run_id="run_" + incident[4:], step_id="logs")


def history(*, shift: timedelta = timedelta(0), origin: str = "live", message: str = "pool timeout") -> list[Turn]:
    args = {"service": "order-service", "start": (fx.START + shift).isoformat(), "end": (fx.END + shift).isoformat()}
    observed = Observation(tool="logs.search", ok=True, summary="1 lines matched", origin=origin,
                           window_start=fx.START + shift, window_end=fx.END + shift,
                           data={"lines": [{"at": (fx.SPLIT + shift).isoformat(), "message": message}]})
    return [Turn(turn=1, decision=ToolProposal(tool="logs.search", args=args, call_id="call_1"), observation=observed)]


def fingerprint(t: BranchTask, h: list[Turn]) -> str:
    return request_fingerprint(POLICY.request, t, h)


def test_a_replay_of_the_same_question_has_the_same_fingerprint() -> None:
    original = fingerprint(task(), history())
    replayed = fingerprint(task(shift=LATER, environment="staging", incident="inc_" + "b" * 32,
                                labels={"team": "payments", "environment": "staging", "ira_replay": "rpl_x",
                                        "ira_recording": "sha256:" + "c" * 64}),
                           history(shift=LATER, origin="recorded:run_x"))
    assert replayed == original and original.startswith("sha256:")


@pytest.mark.parametrize("changed", [
    lambda: fingerprint(task(labels={"team": "checkout"}), history()),
    lambda: fingerprint(task(), history(message="disk full")),
    lambda: fingerprint(task(), []),
])
def test_another_question_has_another_fingerprint(changed) -> None:  # type: ignore[no-untyped-def]
    assert changed() != fingerprint(task(), history())


def test_a_recorded_reply_is_served_moved_into_the_replays_window_and_only_that() -> None:
    args = {"service": "order-service", "start": fx.START.isoformat(), "end": fx.END.isoformat(), "limit": 50}
    reply = ChatReply(model="gpt-fake", tool_calls=(ToolCall(call_id="c1", name="logs__search",
                                                             arguments=json.dumps(args)),))
    models = RecordedModels((RecordedModelCall(fingerprint="sha256:1", response=reply.model_dump(mode="json")),),
                            shift=LATER)

    served = models.reply("sha256:1")

    moved = json.loads(served.tool_calls[0].arguments)
    assert moved["start"] == (fx.START + LATER).isoformat().replace("+00:00", "Z") and moved["limit"] == 50
    with pytest.raises(ModelNotRecordedError):
        models.reply("sha256:2")


def test_only_an_llm_policy_is_answered_from_a_recording() -> None:
    models = RecordedModels(())
    assert answered_by(POLICY, models).recorded is models  # type: ignore[attr-defined]
    assert answered_by(POLICY, None) is POLICY
    rules = rule_policy(BranchKind.LOGS, AgentsSettings().logs)
    assert answered_by(rules, models) is rules
