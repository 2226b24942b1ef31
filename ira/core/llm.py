"""A provider-neutral chat with tools: what the ``LlmClient`` port takes and returns.

Adapters (OpenAI-compatible, Anthropic) map these to their SDK once; a tool call keeps its
arguments as the raw text the model produced, so a malformed call is visible as such instead
of being "repaired" on the way in.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from ira.core.model import Model


class ToolSpec(Model):
    """One tool offered to the model: wire name, description, strict JSON schema."""

    name: str
    description: str
    parameters: dict[str, Any]


class ToolCall(Model):
    call_id: str
    name: str
    arguments: str
    """The arguments exactly as the model wrote them (JSON text, possibly invalid)."""


class ChatMessage(Model):
    """One message of the conversation; assistant turns may carry the tool call they made."""

    role: Literal["user", "assistant", "tool"]
    content: str = ""
    tool_call: ToolCall | None = None
    tool_call_id: str | None = None
    """For ``tool`` messages: the call this is the result of."""
    is_error: bool = False


class ChatRequest(Model):
    model: str
    system: str
    messages: tuple[ChatMessage, ...]
    tools: tuple[ToolSpec, ...] = ()
    max_output_tokens: int = Field(default=1024, ge=1)
    temperature: float = 0.0


class TokenUsage(Model):
    input_tokens: int = 0
    output_tokens: int = 0

    @property
    def total(self) -> int:
        return self.input_tokens + self.output_tokens


class ChatReply(Model):
    model: str
    """The model that answered (may differ from the one requested, e.g. a dated alias)."""
    text: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    usage: TokenUsage = TokenUsage()
    finish_reason: str | None = None
    provider: str = ""
    """``openai`` or ``anthropic``: the GenAI span's ``gen_ai.system``."""
