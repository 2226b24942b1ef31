"""Noise state: is a group key flapping or in an alert storm? Derived, advisory, never the authority.

The faust worker (:mod:`ira.triage.noise_app`) counts, per group key, firing<->resolved
transitions and alert arrivals in a hopping window, and writes a :class:`NoiseVerdict` to
Redis under :func:`verdict_key` with a TTL (the verdict lasts for the cooldown after the
event that triggered it). Triage's decision reads it in its transaction through
:class:`NoiseState`.

Why Redis and not a SQL table: the verdict is derived state that faust rebuilds from its
changelog and the topic, so it needs no durability of its own, and a Redis SET with a TTL
expires it without a sweeper and without competing with triage for SQLite's single writer.
If Redis or faust is down the reader answers "no verdict" and only the SQL cooldown applies:
faust refines (flapping, storms), SQL decides (one run per group key per cooldown).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Protocol

from pydantic import ValidationError

from ira.runtime.settings.triage import NoiseSettings
from ira.triage.decide import NoiseVerdict

if TYPE_CHECKING:
    from redis.asyncio import Redis
    from redis.asyncio.client import Pipeline

log = logging.getLogger(__name__)


def verdict_key(prefix: str, tenant_id: str, group_key: str) -> str:
    """The tenant in a hash tag: a tenant's verdicts share one Redis Cluster slot, so one MGET reads them."""
    return f"{prefix}triage:noise:{{{tenant_id}}}:{group_key}"


def tally_key(prefix: str) -> str:
    """A hash of the noise worker's running totals: ``alerts`` counted and ``records`` (re-keyed) read."""
    return f"{prefix}triage:noise:tallied"


def noise_verdict(
    *, transitions: int, alerts: int, at: datetime, settings: NoiseSettings, cooldown: timedelta
) -> NoiseVerdict | None:
    """The verdict for counts of one window ending at ``at``; None when the group is calm."""
    if transitions >= settings.flapping_transitions:
        kind = "flapping"
    elif alerts >= settings.storm_alerts:
        kind = "storm"
    else:
        return None
    return NoiseVerdict(kind=kind, until=at + cooldown, transitions=transitions, alerts=alerts,
                        window_seconds=settings.window.total_seconds())


Group = tuple[str, str]
"""(tenant_id, group_key)"""


class NoiseState(Protocol):
    """Where triage reads a group key's noise verdict."""

    async def verdict(self, tenant_id: str, group_key: str) -> NoiseVerdict | None:
        """The current verdict, or None (calm, unknown, or the state is unavailable)."""
        ...

    async def verdicts(self, groups: Sequence[Group]) -> dict[Group, NoiseVerdict | None]:
        """The verdicts of many groups in one read (a triage batch's)."""
        ...


class NoNoiseState:
    """Noise control switched off: only the SQL cooldown applies."""

    async def verdict(self, tenant_id: str, group_key: str) -> NoiseVerdict | None:
        return None

    async def verdicts(self, groups: Sequence[Group]) -> dict[Group, NoiseVerdict | None]:
        return dict.fromkeys(groups)


class RedisNoiseState:
    """Verdicts as JSON strings in Redis, expiring on their own."""

    def __init__(self, redis: Redis, *, prefix: str) -> None:
        self._redis, self._prefix = redis, prefix

    async def verdict(self, tenant_id: str, group_key: str) -> NoiseVerdict | None:
        return (await self.verdicts([(tenant_id, group_key)]))[(tenant_id, group_key)]

    async def verdicts(self, groups: Sequence[Group]) -> dict[Group, NoiseVerdict | None]:
        """One MGET per tenant; Redis unavailable means no verdicts (advisory state)."""
        from redis.exceptions import RedisError

        found: dict[Group, NoiseVerdict | None] = {}
        for tenant_id in dict.fromkeys(tenant for tenant, _ in groups):
            keys = list(dict.fromkeys(key for tenant, key in groups if tenant == tenant_id))
            try:
                raws = await self._redis.mget([verdict_key(self._prefix, tenant_id, key) for key in keys])
            except (RedisError, OSError) as exc:  # advisory state: decide without it
                log.warning("noise state unavailable, deciding on SQL alone: %r", exc)
                return dict.fromkeys(groups)
            found.update({(tenant_id, key): _parsed((tenant_id, key), raw)
                          for key, raw in zip(keys, raws, strict=True)})
        return found

    async def record(self, tenant_id: str, group_key: str, verdict: NoiseVerdict, *, now: datetime) -> None:
        """Write ``verdict`` so that it expires when it stops mattering (at ``verdict.until``)."""
        await self.record_into(self._redis, tenant_id, group_key, verdict, now=now)

    def record_into(self, client: Redis | Pipeline, tenant_id: str, group_key: str, verdict: NoiseVerdict, *,
                    now: datetime) -> Any:
        """The SET of :meth:`record` on ``client`` (a pipeline queues it; a client returns its awaitable)."""
        ttl = max(verdict.until - now, timedelta(seconds=1))
        return client.set(verdict_key(self._prefix, tenant_id, group_key), verdict.model_dump_json(),
                          px=int(ttl.total_seconds() * 1000))


def _parsed(group: Group, raw: bytes | str | None) -> NoiseVerdict | None:
    if raw is None:
        return None
    try:
        return NoiseVerdict.model_validate_json(raw)
    except ValidationError:
        log.warning("unreadable noise verdict for %s/%s ignored", *group)
        return None
