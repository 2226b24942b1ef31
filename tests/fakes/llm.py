"""Fake LLM providers on 127.0.0.1 speaking the OpenAI chat-completions and Anthropic messages
APIs, driven by a script of replies (tool calls, malformed ones, text, usage reports).

A script entry is a ``Reply`` or a function of the request body returning one (to react to
what the investigator sent, e.g. an injected instruction in a tool result). Every request
body is kept in ``requests`` for assertions.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route


@dataclass(frozen=True)
class Reply:
    tool: str | None = None
    """Wire name of the tool to call (``logs__search``, ``finish``), or None for text."""
    arguments: str | dict[str, Any] | None = None
    """A dict is sent as JSON; a string is sent as is (so it can be malformed)."""
    text: str = ""
    input_tokens: int = 120
    output_tokens: int = 30
    status: int = 200


Step = Reply | Callable[[dict[str, Any]], Reply]
FINISH_EMPTY = Reply(tool="finish", arguments={"summary": "nothing more", "hypotheses": []})


@dataclass
class FakeLlm:
    script: list[Step]
    requests: list[dict[str, Any]] = field(default_factory=list)

    def _next(self, body: dict[str, Any]) -> Reply:
        self.requests.append(body)
        index = len(self.requests) - 1
        step = self.script[index] if index < len(self.script) else FINISH_EMPTY
        return step(body) if callable(step) else step

    def offered_tools(self, index: int = 0) -> list[str]:
        tools = self.requests[index].get("tools") or []
        return sorted(t["function"]["name"] if "function" in t else t["name"] for t in tools)

    def openai_app(self) -> Starlette:
        async def completions(request: Request) -> JSONResponse:
            reply = self._next(await request.json())
            if reply.status != 200:
                return JSONResponse({"error": {"message": "scripted failure", "type": "server_error"}},
                                    status_code=reply.status)
            return JSONResponse(_openai(reply, len(self.requests)))

        return Starlette(routes=[Route("/v1/chat/completions", completions, methods=["POST"])])

    def anthropic_app(self) -> Starlette:
        async def messages(request: Request) -> JSONResponse:
            reply = self._next(await request.json())
            if reply.status != 200:
                return JSONResponse({"type": "error", "error": {"type": "api_error", "message": "scripted"}},
                                    status_code=reply.status)
            return JSONResponse(_anthropic(reply, len(self.requests)))

        return Starlette(routes=[Route("/v1/messages", messages, methods=["POST"])])


def _raw(arguments: str | dict[str, Any] | None) -> str:
    return arguments if isinstance(arguments, str) else json.dumps(arguments or {})


def _openai(reply: Reply, n: int) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": reply.text or None}
    if reply.tool:
        message["tool_calls"] = [{"id": f"call_{n}", "type": "function",
                                  "function": {"name": reply.tool, "arguments": _raw(reply.arguments)}}]
    return {"id": f"chatcmpl-{n}", "object": "chat.completion", "created": 1777777777, "model": "gpt-fake-2026",
            "choices": [{"index": 0, "message": message, "finish_reason": "tool_calls" if reply.tool else "stop"}],
            "usage": {"prompt_tokens": reply.input_tokens, "completion_tokens": reply.output_tokens,
                      "total_tokens": reply.input_tokens + reply.output_tokens}}


def _anthropic(reply: Reply, n: int) -> dict[str, Any]:
    content: list[dict[str, Any]] = [{"type": "text", "text": reply.text}] if reply.text else []
    if reply.tool:
        given: Any = reply.arguments if isinstance(reply.arguments, str) else (reply.arguments or {})
        content.append({"type": "tool_use", "id": f"toolu_{n}", "name": reply.tool, "input": given})
    return {"id": f"msg_{n}", "type": "message", "role": "assistant", "model": "claude-fake-2026",
            "content": content, "stop_reason": "tool_use" if reply.tool else "end_turn", "stop_sequence": None,
            "usage": {"input_tokens": reply.input_tokens, "output_tokens": reply.output_tokens}}
