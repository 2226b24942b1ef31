"""What the fake Jira and GitHub share: a raw ASGI app (served by uvicorn on 127.0.0.1) that
records every request and can be told to misbehave the way real ticket APIs do.

* ``faults.latency``                 seconds to wait before answering anything
* ``faults.fail(op, status, ...)``   answer ``status`` (with ``Retry-After``) without applying
* ``faults.fail_after_apply(op, s)`` apply the request, then answer ``s`` (a 5xx that did create)
* ``faults.drop(op)``                apply the request, then cut the connection mid-answer
* ``faults.hide_new = True``         new issues stay out of search until ``index()`` (a lagging index)

A dropped answer is a real one: the status line and headers go out, then the connection is
closed before the body (uvicorn closes the socket when the app fails after starting the
response), so the client sees a broken response for a request the server did apply.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs

from ira.runtime.settings.tickets import TicketsSettings

Scope = dict[str, Any]


class DroppedAnswerError(Exception):
    """Raised inside the app after the response started: uvicorn then cuts the connection."""


@dataclass(frozen=True)
class Fault:
    status: int = 0
    retry_after: str | None = None
    message: str = "scripted failure"
    apply: bool = False
    drop: bool = False


@dataclass
class Faults:
    latency: float = 0.0
    hide_new: bool = False
    _queued: dict[str, deque[Fault]] = field(default_factory=dict)

    def fail(self, op: str, status: int, *, times: int = 1, retry_after: str | None = None,
             message: str = "scripted failure") -> None:
        self._add(op, Fault(status=status, retry_after=retry_after, message=message), times)

    def fail_after_apply(self, op: str, status: int, *, times: int = 1) -> None:
        self._add(op, Fault(status=status, apply=True), times)

    def drop(self, op: str, *, times: int = 1) -> None:
        self._add(op, Fault(apply=True, drop=True), times)

    def take(self, op: str) -> Fault | None:
        queue = self._queued.get(op)
        return queue.popleft() if queue else None

    def _add(self, op: str, fault: Fault, times: int) -> None:
        self._queued.setdefault(op, deque()).extend([fault] * times)


@dataclass(frozen=True)
class FakeRequest:
    method: str
    path: str
    query: dict[str, str]
    headers: dict[str, str]
    body: Any
    at: float
    """``time.monotonic()`` when it arrived (to check how long a client waited between tries)."""


@dataclass(frozen=True)
class Answer:
    status: int
    body: Any
    headers: tuple[tuple[str, str], ...] = ()


class FakeTicketApi:
    """Subclasses route (``operation``), authenticate and ``handle``; this class does the rest."""

    issues: list[Any]
    """Each with a ``searchable`` flag (False while the search lags behind)."""

    def __init__(self) -> None:
        self.faults = Faults()
        self.requests: list[FakeRequest] = []
        self.name = type(self).__name__.removeprefix("Fake").lower()

    def index(self) -> None:
        """The lagging search catches up: every issue, and every new one, is searchable."""
        self.faults.hide_new = False
        for issue in self.issues:
            issue.searchable = True

    def settings(self, url: str) -> dict[str, Any]:
        """The raw ``tickets:`` configuration pointing ira at this fake served on ``url``."""
        raise NotImplementedError

    def tickets(self, url: str) -> TicketsSettings:
        return TicketsSettings.model_validate(self.settings(url))

    def operation(self, request: FakeRequest) -> str:
        raise NotImplementedError

    def authorized(self, request: FakeRequest) -> bool:
        raise NotImplementedError

    def handle(self, request: FakeRequest) -> Answer:
        raise NotImplementedError

    def error(self, status: int, message: str) -> Answer:
        raise NotImplementedError

    def calls(self, op: str) -> list[FakeRequest]:
        return [r for r in self.requests if self.operation(r) == op]

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        request = await _read(scope, receive)
        self.requests.append(request)
        if self.faults.latency:
            await asyncio.sleep(self.faults.latency)
        answer = self._answer(request)
        if answer is None:
            await send({"type": "http.response.start", "status": 201,
                        "headers": [(b"content-type", b"application/json"), (b"content-length", b"512")]})
            raise DroppedAnswerError("the fake cut this answer on purpose")
        await _send(send, answer)

    def _answer(self, request: FakeRequest) -> Answer | None:
        fault = self.faults.take(self.operation(request))
        if fault is not None and not fault.apply:
            headers = (("retry-after", fault.retry_after),) if fault.retry_after else ()
            return Answer(fault.status, self.error(fault.status, fault.message).body, headers)
        if not self.authorized(request):
            return self.error(401, "authentication required")
        answer = self.handle(request)
        if fault is not None and fault.drop:
            return None
        if fault is not None:
            return self.error(fault.status, "applied, then failed")
        return answer


async def _read(scope: Scope, receive: Any) -> FakeRequest:
    chunks = []
    while True:
        message = await receive()
        chunks.append(message.get("body", b""))
        if not message.get("more_body"):
            break
    raw = b"".join(chunks)
    query = {k: v[-1] for k, v in parse_qs(scope.get("query_string", b"").decode()).items()}
    headers = {k.decode().lower(): v.decode() for k, v in scope["headers"]}
    return FakeRequest(method=scope["method"], path=scope["path"], query=query, headers=headers,
                       body=json.loads(raw) if raw else None, at=time.monotonic())


async def _send(send: Any, answer: Answer) -> None:
    body = json.dumps(answer.body).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    headers += [(k.encode(), v.encode()) for k, v in answer.headers]
    await send({"type": "http.response.start", "status": answer.status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
