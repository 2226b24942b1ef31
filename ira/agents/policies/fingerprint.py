"""The fingerprint of a model request that a replay of the same investigation reproduces.

The request sent differs between a run and its replay only in what a replay changes by
construction: times (it happens now), ids (incident, run), the environment (``staging``), the
replay's labels on the alert and the observations' origin (which recording answered). The
fingerprint is the sha256 of the request built from a task and history with those made neutral,
then with times and ids masked, so the same question gets the same fingerprint in both, and a
different question (another prompt, model, tool or observation) another one.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from dataclasses import replace

from ira.agents.model import BranchTask, Turn
from ira.core.llm import ChatRequest
from ira.core.replay import RECORDING_LABEL, REPLAY_LABEL, Volatile

NEUTRAL_LABELS = frozenset({"environment", REPLAY_LABEL, RECORDING_LABEL})
"""Labels a replay sets on the alert it sends; the original's value (if any) is not the question."""

RequestOf = Callable[[BranchTask, Sequence[Turn]], ChatRequest]


def request_fingerprint(request_of: RequestOf, task: BranchTask, history: Sequence[Turn]) -> str:
    request = request_of(_neutral_task(task), [_neutral_turn(t) for t in history])
    masked = str(Volatile().mask(request.model_dump_json()))
    return "sha256:" + hashlib.sha256(masked.encode()).hexdigest()


def _neutral_task(task: BranchTask) -> BranchTask:
    b = task.binding
    binding = b.model_copy(update={"environment": "<environment>", "incident_id": "<incident>",
                                   "labels": {k: v for k, v in b.labels.items() if k not in NEUTRAL_LABELS}})
    return replace(task, binding=binding, run_id="<run>")


def _neutral_turn(turn: Turn) -> Turn:
    if turn.observation is None:
        return turn
    return turn.model_copy(update={"observation": turn.observation.model_copy(update={"origin": "<origin>"})})
