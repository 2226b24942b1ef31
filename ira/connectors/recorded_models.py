"""Model answers from a recording: an LLM investigation replays deterministically.

``ira record`` keeps each model call of a run as its request *fingerprint* (the request with what
differs in any replay masked: times, ids, the environment, the replay's labels) and the reply.
A replay's LLM policy computes the same fingerprint and gets the recorded reply instead of
asking a provider (or, where the provider failed, the recorded error again: code and message,
as the original branch saw it), with the times in its tool-call arguments moved like the recorded
observations, so its proposals land inside the replay's window. A request the recording does
not hold is refused (``not_recorded``), never sent to a provider.
"""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

from pydantic import Field, model_validator

from ira.core.errors import ConnectorRejectedError, PlatformError
from ira.core.llm import ChatReply
from ira.core.model import Model
from ira.core.timeshift import retime

SYSTEM = "recorded"


class ModelNotRecordedError(ConnectorRejectedError):
    code = "not_recorded"


class RecordedError(Model):
    """A tool call that failed: replayed as the same error, so the branch ends as it did."""

    code: str
    message: str
    retryable: bool = False


class RecordedToolError(PlatformError):
    """The recorded failure of a call, raised again with its own code (``ConnectorUnavailable``...)."""

    def __init__(self, error: RecordedError) -> None:
        super().__init__(error.message)
        self.code = error.code
        self.retryable = error.retryable


class RecordedModelCall(Model):
    """One line of ``model_calls.jsonl``: an LLM request (by fingerprint) and its response."""

    fingerprint: str
    """sha256 of the canonical request (model, system prompt, messages, tools; volatile parts masked)."""
    response: dict[str, Any] | None = None
    """The reply as ira read it (``ChatReply``: text, tool calls with their raw arguments, usage);
    none when every call of this request failed."""
    errors: tuple[RecordedError, ...] = ()
    """How the provider failed this request, in order, before it answered ``response`` (a branch
    retries an identical request after a failed call): replayed as the same errors, then the reply."""
    usage: dict[str, int] = Field(default_factory=dict)
    branch: str | None = None

    @model_validator(mode="after")
    def _answered(self) -> RecordedModelCall:
        if self.response is None and not self.errors:
            raise ValueError("a model call needs a response or the provider's errors")
        return self


class RecordedModels:
    def __init__(self, calls: tuple[RecordedModelCall, ...], *, shift: timedelta = timedelta(0)) -> None:
        self._calls = {c.fingerprint: c for c in calls}
        self._shift = shift

    def reply(self, fingerprint: str, *, failed: int = 0) -> ChatReply:
        """The recorded answer to a request the branch has already seen fail ``failed`` times."""
        call = self._calls.get(fingerprint)
        if call is None:
            raise ModelNotRecordedError(SYSTEM, f"no recorded model call for request {fingerprint}")
        if call.errors and (failed < len(call.errors) or call.response is None):
            raise RecordedToolError(call.errors[min(failed, len(call.errors) - 1)])
        if call.response is None:
            raise ModelNotRecordedError(SYSTEM, f"recorded model call {fingerprint} has neither reply nor error")
        reply = ChatReply.model_validate(call.response)
        moved = tuple(c.model_copy(update={"arguments": self._moved(c.arguments)}) for c in reply.tool_calls)
        return reply.model_copy(update={"tool_calls": moved})

    def _moved(self, arguments: str) -> str:
        try:
            value = json.loads(arguments)
        except ValueError:
            return arguments  # malformed as the model wrote it: replayed as malformed
        return json.dumps(retime(value, self._shift))
