"""Ports the runtime needs from the outside world, as Protocols (adapters live elsewhere)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol


class RawPublisher(Protocol):
    """Puts bytes on a topic and returns once the broker acknowledged them."""

    async def publish_raw(self, topic: str, key: str, value: bytes, headers: Mapping[str, str]) -> None:
        """Raise BrokerUnavailableError when the broker did not acknowledge."""
        ...


class TopicAdmin(Protocol):
    """Makes sure the topics of one environment exist (the embedded broker forgets them)."""

    async def ensure_topics(self) -> list[str]:
        """Create what is missing; return every topic name of the environment."""
        ...
