"""Anthropic messages API as an ``LlmClient``.

One tool call per turn (parallel tool use off). A ``tool_use`` block whose input is not a JSON
object is passed on as its raw text, so the loop sees a malformed call for what it is.
Errors are translated once, here, like the OpenAI adapter's.
"""

from __future__ import annotations

import json
from typing import Any, cast

import anthropic

from ira.core.errors import ConnectorRejectedError, ConnectorUnavailableError
from ira.core.llm import ChatMessage, ChatReply, ChatRequest, TokenUsage, ToolCall

SYSTEM = "anthropic"


def _input(arguments: str) -> dict[str, Any]:
    try:
        value = json.loads(arguments)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def _message(m: ChatMessage) -> dict[str, Any]:
    if m.role == "tool":
        return {"role": "user", "content": [{"type": "tool_result", "tool_use_id": m.tool_call_id,
                                              "content": m.content, "is_error": m.is_error}]}
    if m.role == "assistant" and m.tool_call is not None:
        blocks: list[dict[str, Any]] = [{"type": "text", "text": m.content}] if m.content else []
        blocks.append({"type": "tool_use", "id": m.tool_call.call_id, "name": m.tool_call.name,
                       "input": _input(m.tool_call.arguments)})
        return {"role": "assistant", "content": blocks}
    return {"role": m.role, "content": m.content}


class AnthropicChatClient:
    def __init__(self, client: anthropic.AsyncAnthropic) -> None:
        self._client = client

    async def complete(self, request: ChatRequest) -> ChatReply:
        tools = [{"name": t.name, "description": t.description, "input_schema": t.parameters} for t in request.tools]
        options: dict[str, Any] = {"tools": tools, "tool_choice": {"type": "auto", "disable_parallel_tool_use": True}} \
            if tools else {}
        try:
            response = await self._client.messages.create(
                model=request.model, system=request.system, messages=cast(Any, [_message(m) for m in request.messages]),
                max_tokens=request.max_output_tokens, **options)
        except (anthropic.APIConnectionError, anthropic.RateLimitError, anthropic.InternalServerError) as exc:
            raise ConnectorUnavailableError(SYSTEM, type(exc).__name__) from exc
        except anthropic.APIStatusError as exc:
            raise ConnectorRejectedError(SYSTEM, f"HTTP {exc.status_code}") from exc
        except anthropic.AnthropicError as exc:
            raise ConnectorUnavailableError(SYSTEM, type(exc).__name__) from exc
        return _reply(response)


def _reply(response: Any) -> ChatReply:
    texts, calls = [], []
    for block in response.content or ():
        if block.type == "text":
            texts.append(block.text)
        elif block.type == "tool_use":
            raw = block.input if isinstance(block.input, str) else json.dumps(block.input)
            calls.append(ToolCall(call_id=block.id, name=block.name, arguments=raw))
    usage = response.usage
    return ChatReply(model=response.model or "", text="\n".join(texts), tool_calls=tuple(calls),
                     usage=TokenUsage(input_tokens=getattr(usage, "input_tokens", 0) or 0,
                                      output_tokens=getattr(usage, "output_tokens", 0) or 0),
                     finish_reason=response.stop_reason, provider=SYSTEM)
