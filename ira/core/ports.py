"""Ports the runtime needs from the outside world, as Protocols (adapters live elsewhere)."""

from __future__ import annotations

from collections.abc import Container, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Protocol

from ira.core.chat import ChatRef
from ira.core.llm import ChatReply, ChatRequest
from ira.core.signals import (
    ChangeQuery,
    ChangeResult,
    LogQuery,
    LogResult,
    MetricResult,
    RunbookQuery,
    RunbookResult,
)
from ira.core.ticket import Ticket, TicketRequest


@dataclass(frozen=True)
class RawRecord:
    """Bytes for a topic, as an outbox row stored them."""

    topic: str
    key: str
    value: bytes
    headers: Mapping[str, str]


class RawPublisher(Protocol):
    """Puts bytes on a topic and returns once the broker acknowledged them."""

    async def publish_raw(self, topic: str, key: str, value: bytes, headers: Mapping[str, str]) -> object:
        """Raise BrokerUnavailableError when the broker did not acknowledge."""
        ...

    async def publish_raw_many(self, records: Sequence[RawRecord], *, pack: Container[str] = frozenset()
                               ) -> Sequence[object]:
        """Send all, wait for all; per record its acknowledgement or the error (never raises
        for one record: the caller marks what was acknowledged). Records of a topic in ``pack``
        may travel several to a Kafka record (``ira.runtime.bus.pack``)."""
        ...


class TopicAdmin(Protocol):
    """Makes sure the topics of one environment exist (the embedded broker forgets them)."""

    async def ensure_topics(self) -> list[str]:
        """Create what is missing; return every topic name of the environment."""
        ...


class TicketSystem(Protocol):
    """Creates tickets exactly once per idempotency key, fenced by the writer's epoch.

    ``namespace`` names the writer's ownership scope (``<run_id>/<step_id>``); a system that
    enforces barriers rejects a create or barrier whose epoch is below the highest it has
    seen for that namespace (StaleEpochError). Same key + same payload -> the same ticket;
    same key + another payload -> ConnectorRejectedError. Unreachable -> ConnectorUnavailableError.
    """

    name: str

    async def create(
        self, request: TicketRequest, *, idempotency_key: str, namespace: str, epoch: int
    ) -> Ticket:
        """Create (or return the ticket already created for ``idempotency_key``)."""
        ...

    async def find_by_key(self, tenant_id: str, idempotency_key: str) -> Ticket | None:
        """The ticket created for ``idempotency_key``, or None if there is none (yet)."""
        ...

    async def raise_barrier(self, tenant_id: str, namespace: str, epoch: int) -> bool:
        """Refuse later writes below ``epoch``; False if this system cannot enforce barriers.

        True means a later ``find_by_key`` that finds nothing is definitive: no write from an
        older epoch can still land.
        """
        ...


class MetricSource(Protocol):
    """Read-only metrics (Prometheus HTTP API or a recording of it)."""

    async def query_range(self, query: str, *, start: datetime, end: datetime, step: timedelta) -> MetricResult:
        """Series of ``query`` from ``start`` to ``end``; ConnectorRejectedError for a bad query."""
        ...

    async def query(self, query: str, *, at: datetime) -> MetricResult:
        """The instant vector of ``query`` at ``at``."""
        ...


class LogSource(Protocol):
    """Read-only log search (Loki, JSONL files, a recording)."""

    async def search(self, query: LogQuery) -> LogResult:
        """Matching lines, newest first, at most ``query.limit`` (``partial`` says if cut)."""
        ...


class RunbookSource(Protocol):
    """Runbooks ranked for an alert, a service and symptoms."""

    async def search(self, query: RunbookQuery) -> RunbookResult:
        """Best hits first, each saying whether it applies to ``query.version``."""
        ...


class ChangeSource(Protocol):
    """Deploys and configuration changes recorded from change events."""

    async def list_changes(self, query: ChangeQuery) -> ChangeResult:
        """Changes of one tenant's service and environment in the window, newest first."""
        ...


class LlmClient(Protocol):
    """One chat completion with tools (OpenAI-compatible or Anthropic)."""

    async def complete(self, request: ChatRequest) -> ChatReply:
        """ConnectorUnavailableError when the provider is down or limiting; Rejected for a 4xx."""
        ...


class ChatPoster(Protocol):
    """Posts and updates messages in a chat workspace (Slack). ``blocks`` are the channel's own
    layout (Block Kit); ``key`` is a stable id stored with the post (message metadata), so a
    retry after a lost answer can find the earlier post instead of posting twice.
    SlackRejectedError for a definite no, SlackUnavailableError for a retryable one."""

    async def post(self, channel: str, *, text: str, blocks: Sequence[Mapping[str, Any]], key: str,
                   thread_ts: str | None = None) -> ChatRef:
        """Post one message (a thread reply when ``thread_ts`` is given)."""
        ...

    async def update(self, ref: ChatRef, *, text: str, blocks: Sequence[Mapping[str, Any]]) -> None:
        """Replace the message at ``ref``."""
        ...

    async def find_posted(self, channel: str, *, key: str, since: datetime,
                          thread_ts: str | None = None) -> ChatRef | None:
        """The message posted with ``key`` after ``since`` (in the thread ``thread_ts``), if any."""
        ...

    async def tell(self, channel: str, user: str, *, text: str) -> None:
        """A message only ``user`` sees (ephemeral)."""
        ...

    async def open_view(self, trigger_id: str, view: Mapping[str, Any]) -> None:
        """A dialog (Slack modal) for the person whose click gave ``trigger_id``."""
        ...
