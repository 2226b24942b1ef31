"""A Slack Web API fake on 127.0.0.1, plus Slack's side of interactions (signed clicks).

It is a small HTTP/1.1 server on asyncio streams (not an ASGI app) so that it can do what
Slack's network does to a client: answer late (``latency``), answer 429 with Retry-After,
and *drop a response after applying the call* (close the connection with no answer), the
case where only a history lookup can tell the client its post exists.

Methods: auth.test, conversations.list/info/history/replies, chat.postMessage/update/
postEphemeral, views.open (the modal is kept in ``views``) — with Slack's checks that matter
here (token, channel, membership, block limits, message metadata returned only with
``include_all_metadata``). Every call is recorded in ``calls``.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import time
import urllib.parse
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

from tests.fakes.slack_interactions import block_actions_body, signed_headers, view_submission_body

BOT_TOKEN = "xoxb-fake-bot-token"
SIGNING_SECRET = "fake-signing-secret"
CHANNEL_ID = "C0INCIDENTS"
CHANNEL_NAME = "incidents"
BOT_USER = "U0IRABOT"
MAX_BLOCKS = 50
MAX_SECTION_TEXT = 3000

__all__ = ["BOT_TOKEN", "CHANNEL_ID", "SIGNING_SECRET", "FakeSlack", "block_actions_body", "fake_slack",
           "signed_headers", "view_submission_body"]


@dataclass
class Call:
    method: str
    args: dict[str, Any]
    at: float = field(default_factory=time.monotonic)
    answered: bool = True


@dataclass
class Fault:
    """What the next call of ``method`` gets instead of a normal answer."""

    method: str
    kind: str  #: "ratelimited" | "drop" (apply, then close without answering) | "error"
    retry_after: int = 1
    error: str = "internal_error"


@dataclass
class FakeSlack:
    url: str = ""
    """The API base URL, with the trailing slash slack-sdk needs."""
    latency: float = 0.0
    calls: list[Call] = field(default_factory=list)
    faults: list[Fault] = field(default_factory=list)
    messages: dict[str, list[dict[str, Any]]] = field(default_factory=lambda: {CHANNEL_ID: []})
    members: set[str] = field(default_factory=lambda: {CHANNEL_ID})
    """Channels the bot is in."""
    ephemeral: list[dict[str, Any]] = field(default_factory=list)
    views: list[dict[str, Any]] = field(default_factory=list)
    """Modals opened (each with the ``id`` Slack gave it), in order."""
    _ts: itertools.count[int] = field(default_factory=lambda: itertools.count(1))

    def calls_of(self, method: str) -> list[Call]:
        return [c for c in self.calls if c.method == method]

    def posts(self, channel: str = CHANNEL_ID) -> list[dict[str, Any]]:
        return list(self.messages.get(channel, []))

    def top_level(self, channel: str = CHANNEL_ID) -> list[dict[str, Any]]:
        return [m for m in self.posts(channel) if m.get("thread_ts") in (None, m["ts"])]

    def replies(self, thread_ts: str, channel: str = CHANNEL_ID) -> list[dict[str, Any]]:
        return [m for m in self.posts(channel) if m.get("thread_ts") == thread_ts and m["ts"] != thread_ts]

    def fail_next(self, method: str, kind: str, **kw: Any) -> None:
        self.faults.append(Fault(method=method, kind=kind, **kw))

    # -- serving ---------------------------------------------------------------------------

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                request = await _read_request(reader)
                if request is None:
                    return
                if not await self._answer(request, writer):
                    return
        except (ConnectionError, asyncio.IncompleteReadError):
            return
        finally:
            writer.close()

    async def _answer(self, request: tuple[str, str, dict[str, str], bytes], writer: asyncio.StreamWriter) -> bool:
        _verb, target, headers, body = request
        path, _, query = target.partition("?")
        method = path.rsplit("/", 1)[-1]
        args = _args(query, headers, body)
        fault = next((f for f in self.faults if f.method == method), None)
        if fault is not None:
            self.faults.remove(fault)
        if self.latency:
            await asyncio.sleep(self.latency)
        call = Call(method=method, args=args)
        self.calls.append(call)
        if fault is not None and fault.kind == "ratelimited":
            _write(writer, 429, {"ok": False, "error": "ratelimited"}, {"Retry-After": str(fault.retry_after)})
            return True
        if fault is not None and fault.kind == "error":
            _write(writer, 200, {"ok": False, "error": fault.error})
            return True
        answer = self._apply(method, args, headers)
        if fault is not None and fault.kind == "drop":
            call.answered = False
            return False  # applied, never answered: the connection closes
        _write(writer, 200, answer)
        return True

    def _apply(self, method: str, args: dict[str, Any], headers: dict[str, str]) -> dict[str, Any]:
        if headers.get("authorization") != f"Bearer {BOT_TOKEN}":
            return {"ok": False, "error": "invalid_auth"}
        handler = getattr(self, "_m_" + method.replace(".", "_"), None)
        if handler is None:
            return {"ok": False, "error": "unknown_method"}
        return handler(args)

    # -- methods ---------------------------------------------------------------------------

    def _m_auth_test(self, args: dict[str, Any]) -> dict[str, Any]:
        return {"ok": True, "user": "ira", "user_id": BOT_USER, "team": "Fake Team", "team_id": "T0FAKE"}

    def _m_conversations_list(self, args: dict[str, Any]) -> dict[str, Any]:
        listed = {"id": CHANNEL_ID, "name": CHANNEL_NAME, "is_member": CHANNEL_ID in self.members}
        return {"ok": True, "channels": [listed], "response_metadata": {"next_cursor": ""}}

    def _m_conversations_info(self, args: dict[str, Any]) -> dict[str, Any]:
        channel = args.get("channel")
        if channel not in self.messages:
            return {"ok": False, "error": "channel_not_found"}
        return {"ok": True, "channel": {"id": channel, "name": CHANNEL_NAME, "is_member": channel in self.members}}

    def _m_conversations_history(self, args: dict[str, Any]) -> dict[str, Any]:
        channel = args.get("channel", "")
        if channel not in self.messages:
            return {"ok": False, "error": "channel_not_found"}
        oldest = float(args.get("oldest") or 0)
        found = [m for m in self.top_level(channel) if float(m["ts"]) >= oldest]
        return {"ok": True, "messages": [self._shown(m, args) for m in reversed(found)], "has_more": False}

    def _m_conversations_replies(self, args: dict[str, Any]) -> dict[str, Any]:
        channel, ts = args.get("channel", ""), args.get("ts", "")
        thread = [m for m in self.posts(channel) if m["ts"] == ts or m.get("thread_ts") == ts]
        if not thread:
            return {"ok": False, "error": "thread_not_found"}
        return {"ok": True, "messages": [self._shown(m, args) for m in thread], "has_more": False}

    def _m_chat_postMessage(self, args: dict[str, Any]) -> dict[str, Any]:
        channel = self._resolve(str(args.get("channel", "")))
        refused = self._refusal(channel, args)
        if refused:
            return {"ok": False, "error": refused}
        ts = self._next_ts()
        message = {"ts": ts, "user": BOT_USER, "text": args.get("text", ""), "blocks": _loaded(args.get("blocks")),
                   "metadata": _loaded(args.get("metadata")), "thread_ts": args.get("thread_ts")}
        self.messages[channel].append(message)
        return {"ok": True, "channel": channel, "ts": ts, "message": message}

    def _m_chat_update(self, args: dict[str, Any]) -> dict[str, Any]:
        channel, ts = str(args.get("channel", "")), str(args.get("ts", ""))
        found = next((m for m in self.messages.get(channel, []) if m["ts"] == ts), None)
        if found is None:
            return {"ok": False, "error": "message_not_found"}
        blocks = _loaded(args.get("blocks"))
        if _too_big(blocks):
            return {"ok": False, "error": "invalid_blocks"}
        found.update(text=args.get("text", ""), blocks=blocks, edited=True)
        return {"ok": True, "channel": channel, "ts": ts}

    def _m_chat_postEphemeral(self, args: dict[str, Any]) -> dict[str, Any]:
        self.ephemeral.append({"channel": args.get("channel"), "user": args.get("user"), "text": args.get("text")})
        return {"ok": True, "message_ts": self._next_ts()}

    def _m_views_open(self, args: dict[str, Any]) -> dict[str, Any]:
        view = _loaded(args.get("view"))
        if not args.get("trigger_id"):
            return {"ok": False, "error": "invalid_trigger_id"}
        if not isinstance(view, dict) or view.get("type") != "modal" or len(view.get("blocks") or []) > 100:
            return {"ok": False, "error": "invalid_arguments"}
        opened = {**view, "id": f"V{len(self.views) + 1:08d}", "trigger_id": args["trigger_id"]}
        self.views.append(opened)
        return {"ok": True, "view": opened}

    # -- helpers ---------------------------------------------------------------------------

    def _resolve(self, channel: str) -> str:
        return CHANNEL_ID if channel == f"#{CHANNEL_NAME}" else channel

    def _refusal(self, channel: str, args: dict[str, Any]) -> str | None:
        if channel not in self.messages:
            return "channel_not_found"
        if channel not in self.members:
            return "not_in_channel"
        return "invalid_blocks" if _too_big(_loaded(args.get("blocks"))) else None

    def _shown(self, message: dict[str, Any], args: dict[str, Any]) -> dict[str, Any]:
        if str(args.get("include_all_metadata", "")).lower() in ("1", "true"):
            return dict(message)
        return {k: v for k, v in message.items() if k != "metadata"}

    def _next_ts(self) -> str:
        n = next(self._ts)
        return f"{int(time.time())}.{n:06d}"


def _too_big(blocks: Any) -> bool:
    if not isinstance(blocks, list):
        return False
    texts = [b.get("text", {}).get("text", "") for b in blocks if isinstance(b.get("text"), dict)]
    return len(blocks) > MAX_BLOCKS or any(len(t) > MAX_SECTION_TEXT for t in texts)


def _loaded(value: Any) -> Any:
    if isinstance(value, str) and value[:1] in "[{":
        return json.loads(value)
    return value


def _args(query: str, headers: dict[str, str], body: bytes) -> dict[str, Any]:
    args: dict[str, Any] = dict(urllib.parse.parse_qsl(query))
    kind = headers.get("content-type", "")
    if body and "json" in kind:
        args.update(json.loads(body))
    elif body:
        args.update(urllib.parse.parse_qsl(body.decode()))
    return args


async def _read_request(reader: asyncio.StreamReader) -> tuple[str, str, dict[str, str], bytes] | None:
    head = await reader.readuntil(b"\r\n\r\n") if not reader.at_eof() else b""
    if not head:
        return None
    lines = head.decode("latin-1").split("\r\n")
    verb, target, _ = lines[0].split(" ", 2)
    headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:] if line)}
    body = await reader.readexactly(int(headers.get("content-length", "0") or 0))
    return verb, target, headers, body


def _write(writer: asyncio.StreamWriter, status: int, body: dict[str, Any], headers: dict[str, str] | None = None
           ) -> None:
    data = json.dumps(body).encode()
    reason = {200: "OK", 429: "Too Many Requests"}.get(status, "Error")
    extra = "".join(f"{k}: {v}\r\n" for k, v in (headers or {}).items())
    writer.write(f"HTTP/1.1 {status} {reason}\r\ncontent-type: application/json; charset=utf-8\r\n"
                 f"content-length: {len(data)}\r\n{extra}\r\n".encode() + data)


@asynccontextmanager
async def fake_slack(*, latency: float = 0.0) -> AsyncIterator[FakeSlack]:
    fake = FakeSlack(latency=latency)
    server = await asyncio.start_server(fake._serve, host="127.0.0.1", port=0)
    port = server.sockets[0].getsockname()[1]
    fake.url = f"http://127.0.0.1:{port}/api/"
    try:
        yield fake
    finally:
        server.close()
        await server.wait_closed()
