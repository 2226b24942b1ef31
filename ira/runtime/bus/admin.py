"""Topic administration: create the topics of DESIGN.md §5 per environment, check they exist.

Topics are always created explicitly, never by auto-create: an auto-created topic gets the
broker's defaults (Tansu: 4 partitions) instead of ours, and the embedded broker loses every
topic on restart, so ``ira dev`` and the readiness check must be able to tell and recreate.

Careful with Tansu: a metadata request that *names* an unknown topic creates it. Existence is
therefore checked by listing all topics, never by describing the ones we expect.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterable
from contextlib import asynccontextmanager
from datetime import timedelta
from typing import Any

from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.errors import KafkaError, TopicAlreadyExistsError, for_code

from ira.core.envelope import Topic, topic_name
from ira.core.errors import BrokerUnavailableError, ConfigError

DEFAULT_PARTITIONS = 3
DEFAULT_TIMEOUT = timedelta(seconds=5)


def topic_names(environment: str, topics: Iterable[Topic] = Topic) -> list[str]:
    """The physical names of ``topics`` in ``environment`` (``staging.`` prefix and so on)."""
    return [topic_name(topic, environment) for topic in topics]


@asynccontextmanager
async def _admin(bootstrap: str, timeout: timedelta) -> AsyncIterator[AIOKafkaAdminClient]:
    """A connected admin client; every Kafka failure inside becomes BrokerUnavailableError."""
    client = AIOKafkaAdminClient(bootstrap_servers=bootstrap, client_id="ira-admin",
                                 request_timeout_ms=int(timeout.total_seconds() * 1000))
    try:
        async with asyncio.timeout(timeout.total_seconds() * 2):
            await client.start()
            yield client
    except (KafkaError, OSError, TimeoutError) as exc:
        raise BrokerUnavailableError(f"kafka at {bootstrap}: {type(exc).__name__}: {exc}") from exc
    finally:
        await client.close()


async def ensure_topics(
    bootstrap: str,
    environment: str,
    *,
    partitions: int = DEFAULT_PARTITIONS,
    replication: int = 1,
    timeout: timedelta = DEFAULT_TIMEOUT,
) -> list[str]:
    """Create every topic of ``environment`` that is missing; return all their names.

    Idempotent: a topic that already exists is left as it is (its partition count too).
    """
    names = topic_names(environment)
    async with _admin(bootstrap, timeout) as admin:
        existing = set(await admin.list_topics())
        wanted = [NewTopic(n, partitions, replication) for n in names if n not in existing]
        if wanted:
            response = await admin.create_topics(wanted, timeout_ms=int(timeout.total_seconds() * 1000))
            _check_created(response.topic_errors)
    return names


def _check_created(topic_errors: Iterable[tuple[Any, ...]]) -> None:
    """Accept success and already-exists (a concurrent creator won); refuse the rest."""
    for topic, code, *message in topic_errors:
        if code == 0 or code == TopicAlreadyExistsError.errno:
            continue
        error = for_code(code)
        detail = f"creating topic {topic}: {error.__name__} {message[0] if message else ''}".strip()
        if error.retriable:
            raise BrokerUnavailableError(detail)
        raise ConfigError("kafka.topics", detail)


async def missing_topics(
    bootstrap: str, environment: str, *, timeout: timedelta = DEFAULT_TIMEOUT
) -> list[str]:
    """The topics of ``environment`` the broker does not have (``/readyz``, ``ira doctor``)."""
    async with _admin(bootstrap, timeout) as admin:
        existing = set(await admin.list_topics())
    return [name for name in topic_names(environment) if name not in existing]


async def topics_exist(bootstrap: str, environment: str, *, timeout: timedelta = DEFAULT_TIMEOUT) -> bool:
    """True when every topic of ``environment`` exists (false after an embedded broker restart)."""
    return not await missing_topics(bootstrap, environment, timeout=timeout)
