"""OpenAI-compatible chat completions (OpenAI, vLLM, Ollama, LiteLLM...) as an ``LlmClient``.

Tools are offered as strict function schemas, one call per turn (``parallel_tool_calls``
off). Tool-call arguments are passed through as the raw text the model wrote. SDK errors are
translated once, here: unreachable, timeouts, 429 and 5xx are retryable; other 4xx are not.
"""

from __future__ import annotations

from typing import Any, cast

import openai

from ira.core.errors import ConnectorRejectedError, ConnectorUnavailableError
from ira.core.llm import ChatMessage, ChatReply, ChatRequest, TokenUsage, ToolCall

SYSTEM = "openai"


def _message(m: ChatMessage) -> dict[str, Any]:
    if m.role == "tool":
        return {"role": "tool", "tool_call_id": m.tool_call_id, "content": m.content}
    if m.role == "assistant" and m.tool_call is not None:
        call = {"id": m.tool_call.call_id, "type": "function",
                "function": {"name": m.tool_call.name, "arguments": m.tool_call.arguments}}
        return {"role": "assistant", "content": m.content or None, "tool_calls": [call]}
    return {"role": m.role, "content": m.content}


class OpenAiChatClient:
    """``client`` is built by the composition root (base_url, api key, timeout, max_retries=0)."""

    def __init__(self, client: openai.AsyncOpenAI) -> None:
        self._client = client

    async def complete(self, request: ChatRequest) -> ChatReply:
        tools = [{"type": "function", "function": {"name": t.name, "description": t.description,
                                                    "parameters": t.parameters, "strict": True}}
                 for t in request.tools]
        options: dict[str, Any] = {"tools": tools, "tool_choice": "auto", "parallel_tool_calls": False} if tools else {}
        try:
            response = await self._client.chat.completions.create(
                model=request.model, messages=cast(Any, [{"role": "system", "content": request.system},
                                                         *(_message(m) for m in request.messages)]),
                max_tokens=request.max_output_tokens, temperature=request.temperature, **options)
        except (openai.APIConnectionError, openai.RateLimitError, openai.InternalServerError) as exc:
            raise ConnectorUnavailableError(SYSTEM, type(exc).__name__) from exc
        except openai.APIStatusError as exc:
            raise ConnectorRejectedError(SYSTEM, f"HTTP {exc.status_code}") from exc
        except openai.OpenAIError as exc:  # e.g. an answer the SDK cannot parse
            raise ConnectorUnavailableError(SYSTEM, type(exc).__name__) from exc
        return _reply(response)


def _reply(response: Any) -> ChatReply:
    if not response.choices:
        raise ConnectorUnavailableError(SYSTEM, "answer without choices")
    choice = response.choices[0]
    calls = tuple(ToolCall(call_id=c.id, name=c.function.name, arguments=c.function.arguments or "")
                  for c in choice.message.tool_calls or () if getattr(c, "function", None) is not None)
    usage = response.usage
    return ChatReply(model=response.model or "", text=choice.message.content or "", tool_calls=calls,
                     usage=TokenUsage(input_tokens=usage.prompt_tokens if usage else 0,
                                      output_tokens=usage.completion_tokens if usage else 0),
                     finish_reason=choice.finish_reason, provider=SYSTEM)
