"""Where the noise worker's windows come from: the events topic, counted again (noise worker process only).

The windows (:class:`~ira.triage.noise_app.NoiseWindows`) have no changelog: :func:`rebuild`
counts the events topic again up to the offsets ``tally`` committed. :class:`Ownership` keeps
the state in step with what the consumer group gives this worker, at the start and at every
rebalance: a partition gained (the first assignment, a worker that stopped, one that came back)
is rebuilt before ``tally`` counts its next batch, a partition taken away (another worker
counts it now) is dropped. Before, the state was rebuilt only when the worker started, for
every partition: a worker that took over a stopped one's partitions counted their groups'
flaps from zero, and one whose partitions came back kept stale counts for them.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Collection
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ira.triage.noise_app import NoiseWindows, NoiseWorkerConfig

log = logging.getLogger(__name__)


class Ownership:
    """Which events partitions the windows hold, kept right across rebalances.

    ``rebuild(partitions)`` counts those partitions into the windows (:func:`rebuild` with ``only``).
    """

    def __init__(self, windows: NoiseWindows, rebuild: Callable[[set[int]], Awaitable[int]]) -> None:
        self._windows, self._rebuild = windows, rebuild
        self._held: set[int] = set()
        self._pending: set[int] = set()

    def assigned(self, partitions: set[int]) -> None:
        """A rebalance gave this worker ``partitions`` (its whole assignment of the events topic)."""
        self._pending = (self._pending | (partitions - self._held)) & partitions
        self._windows.forget(self._windows.partitions() - partitions)
        self._held = set(partitions)

    async def ready(self) -> None:
        """Rebuild the partitions gained since the last call (``tally`` calls it before counting)."""
        if self._pending:
            pending, self._pending = self._pending, set()
            self._windows.forget(pending)  # what it held of them before it lost them is stale
            counted = await self._rebuild(pending)
            log.info("noise state of partition(s) %s rebuilt from %d records", sorted(pending), counted)


def rebuild_key(prefix: str, app_id: str) -> str:
    """A Redis hash: per events partition, the offset :func:`rebuild` reads from (``tally`` keeps it)."""
    return f"{prefix}triage:noise:rebuild-from:{app_id}"


async def rebuild(config: NoiseWorkerConfig, windows: NoiseWindows, *, within: float = 120.0,
                  only: Collection[int] | None = None) -> int:
    """Count into ``windows`` the events topic (its partitions ``only``, default all) up to the
    offsets ``tally`` committed: the state it had when it stopped (what it had not committed it
    counts again when it resumes, not twice).

    Reads each partition from where ``tally`` last said its kept state begins
    (:func:`rebuild_key`; Tansu answers no offsets by time), or from the beginning when Redis
    does not say. Gives up after ``within`` seconds and starts with what it read (advisory
    state). Returns the records counted.
    """
    from aiokafka import AIOKafkaConsumer, TopicPartition

    starts = await _rebuild_starts(config)

    reader = AIOKafkaConsumer(bootstrap_servers=config.bootstrap, group_id=config.app_id, enable_auto_commit=False)
    await reader.start()
    try:
        if config.events_topic not in await reader.topics():
            return 0  # never asked for before it exists: the broker would create it with its own partition count
        partitions = [TopicPartition(config.events_topic, p) for p in range(config.partitions)
                      if only is None or p in only]
        committed = {tp: await reader.committed(tp) or 0 for tp in partitions}
        wanted = {tp for tp in partitions if committed[tp] > starts.get(tp.partition, 0)}
        if not wanted:
            return 0
        reader.assign(list(wanted))
        for tp in wanted:
            reader.seek(tp, starts.get(tp.partition, 0))
        counted, deadline = 0, asyncio.get_running_loop().time() + within
        while wanted and asyncio.get_running_loop().time() < deadline:
            for tp, records in (await reader.getmany(*wanted, timeout_ms=500)).items():
                for record in records:
                    if record.offset < committed[tp] and record.value is not None:
                        windows.count(record.value, partition=tp.partition, offset=record.offset)
                        counted += 1
                if records and records[-1].offset + 1 >= committed[tp]:
                    wanted.discard(tp)
                    reader.pause(tp)
        if wanted:
            log.warning("noise state rebuilt only in part (%d records; %d partitions unfinished)", counted, len(wanted))
        return counted
    finally:
        await reader.stop()


async def _rebuild_starts(config: NoiseWorkerConfig) -> dict[int, int]:
    from redis.asyncio import Redis
    from redis.exceptions import RedisError

    redis = Redis.from_url(config.redis_url)
    try:
        return {int(p): int(o) for p, o in (await redis.hgetall(rebuild_key(config.key_prefix, config.app_id))).items()}
    except (RedisError, OSError, ValueError) as exc:
        log.warning("no rebuild offsets (%r): the noise state is rebuilt from the beginning", exc)
        return {}
    finally:
        await redis.aclose()
