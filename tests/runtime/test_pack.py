"""Packs: a relay pass's rows of one partition as one Kafka record, and every reader's rows back.

The framing alone, then against the real embedded broker: where the producer puts a pack (the
partition each member would have had alone), that a consumer applies each member once in key
order, and that a stop between two members of a pack commits before the pack, not past it.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from aiokafka import TopicPartition
from aiokafka.structs import ConsumerRecord
from sqlalchemy.ext.asyncio import AsyncConnection

from ira.core.envelope import Envelope, Topic, topic_name
from ira.core.ids import new_event_id
from ira.core.ports import RawRecord
from ira.infra.tansu import EmbeddedKafka
from ira.runtime.bus.pack import MAGIC, Member, PackMember, is_pack, pack, packs, through, unpack, unpacked
from ira.runtime.bus.producer import PACK_HEADER, BusProducer, Published
from ira.runtime.bus.record import RecordMeta
from ira.runtime.store.database import Database
from ira.runtime.store.outbox import envelope_headers
from tests.eventually import eventually
from tests.runtime.test_bus import (
    applied,
    committed_offset,
    effects_metadata,
    read_topic,
    recording_handler,
    runner,
    running,
)
from tests.store_fixtures import open_database

# --- the framing ----------------------------------------------------------------------------


def test_a_pack_gives_back_its_members_in_order_keys_headers_and_bytes_as_they_were() -> None:
    members = [PackMember(key="acme:fp-1", headers={"event_id": "e1", "tenant_id": "acme"}, value=b'{"a":1}'),
               PackMember(key=None, headers={}, value=b""),
               PackMember(key="acme:fp-\u00e9", headers={"traceparent": "00-ab-cd-01"}, value=bytes(range(256)))]
    value = pack(members)
    assert value.startswith(MAGIC) and is_pack(value) and not is_pack(b'{"message_id": "m"}')
    assert unpack(value) == members


@pytest.mark.parametrize("cut", [1, 5, 17, -1])
def test_a_pack_that_does_not_frame_exactly_is_not_taken_apart(cut: int) -> None:
    value = pack([PackMember(key="k", headers={"a": "b"}, value=b"v" * 20)] * 2)
    assert unpack(value[:len(MAGIC) + cut] if cut > 0 else value + b"x") is None
    assert unpack(MAGIC) is None  # no member at all
    assert unpack(MAGIC + b"\x00\x00\x00\x01\x00\x00\x00\x02\x00\x00\x00\x00k[]") is None  # headers not an object
    assert unpack(b'{"not": "a pack"}') is None


def test_packs_are_cut_at_their_member_and_byte_limits_in_order() -> None:
    members = [PackMember(key=f"k{i}", headers={}, value=b"x" * 100) for i in range(10)]
    assert [len(p) for p in packs(members, max_members=4)] == [4, 4, 2]
    by_bytes = packs(members, max_bytes=400)
    assert [m for p in by_bytes for m in p] == members and all(1 <= len(p) <= 3 for p in by_bytes)
    assert packs([PackMember(key="big", headers={}, value=b"x" * 10_000)], max_bytes=400) == [
        [PackMember(key="big", headers={}, value=b"x" * 10_000)]]  # one too big for a pack still goes


def record(offset: int, value: bytes, *, key: bytes | None = b"k") -> ConsumerRecord[bytes, bytes]:
    return ConsumerRecord(topic="t", partition=2, offset=offset, timestamp=1_000, timestamp_type=0, key=key,
                          value=value, checksum=None, serialized_key_size=1, serialized_value_size=len(value),
                          headers=((PACK_HEADER, b"2"),))


def test_a_consumer_sees_a_packs_members_at_its_offset_done_through_it_only_with_the_last() -> None:
    plain = record(6, b'{"plain": true}')
    packed = record(7, pack([PackMember(key="a", headers={"event_id": "e1"}, value=b"one"),
                             PackMember(key="b", headers={"event_id": "e2"}, value=b"two")]))
    broken = record(8, MAGIC + b"\x00\x00")
    out = unpacked([plain, packed, broken])
    assert out[0] is plain and out[3] is broken  # the broken pack stays whole: its reader refuses it
    first, second = out[1], out[2]
    assert isinstance(first, Member) and isinstance(second, Member)
    assert (first.key, first.value, first.headers, first.offset) == (b"a", b"one", (("event_id", b"e1"),), 7)
    assert (second.key, second.value, second.offset, second.partition, second.timestamp) == (b"b", b"two", 7, 2, 1_000)
    assert [through(r) for r in out] == [6, 6, 7, 8]
    assert unpacked([plain]) == [plain]


# --- on the broker --------------------------------------------------------------------------


@pytest.fixture
async def db(tmp_path: Path) -> AsyncIterator[Database]:
    """A migrated SQLite database with test_bus.py's effects table."""
    database, _ = await open_database("sqlite", tmp_path)
    async with database.transaction() as conn:
        await conn.run_sync(effects_metadata.create_all)
    yield database
    await database.close()


@pytest.fixture
async def producer(kafka: EmbeddedKafka) -> AsyncIterator[BusProducer]:
    async with BusProducer(kafka.bootstrap, request_timeout=timedelta(seconds=2)) as bus_producer:
        yield bus_producer


def row(topic: str, key: str, n: int) -> tuple[RawRecord, Envelope]:
    env = Envelope(message_id=new_event_id(), type="test.event", tenant_id="acme", occurred_at=datetime.now(UTC),
                   payload={"key": key, "n": n})
    return RawRecord(topic=topic, key=key, value=env.to_bytes(), headers=envelope_headers(env)), env


async def test_a_pass_of_rows_is_one_record_per_partition_each_row_where_it_would_go_alone_and_read_once_in_order(
    kafka: EmbeddedKafka, bus_env: str, producer: BusProducer, db: Database
) -> None:
    topic = topic_name(Topic.ALERTS, bus_env)
    keys = [f"acme:fp-{i}" for i in range(12)]
    rows = [row(topic, keys[n % len(keys)], n) for n in range(60)]
    firsts = [row(topic, key, -1) for key in keys]
    alone = [await producer.publish_raw(topic, r.key, r.value, r.headers) for r, _ in firsts]  # one record each
    where = {key: published.partition for key, published in zip(keys, alone, strict=True)}
    assert len(set(where.values())) > 1  # the keys spread over partitions: the test can tell them apart

    results = await producer.publish_raw_many([r for r, _ in rows], pack=frozenset({topic}))

    assert all(isinstance(r, Published) for r in results)
    records = await read_topic(kafka, topic, len(keys) + len(set(where.values())))
    packed = [r for r in records if is_pack(r.value)]
    assert len(packed) == len(set(where.values())) and len(records) == len(keys) + len(packed)
    for r in packed:
        members = unpack(r.value)
        assert members is not None and {where[m.key] for m in members if m.key} == {r.partition}
        assert dict(r.headers)[PACK_HEADER] == str(len(members)).encode()
    assert {(r.partition, r.offset) for r in packed} == {(p.partition, p.offset) for p in results  # type: ignore[union-attr]
                                                          if isinstance(p, Published)}

    seen: list[tuple[str, int]] = []

    async def handler(conn: AsyncConnection, env: Envelope, meta: RecordMeta) -> None:
        seen.append((env.payload["key"], env.payload["n"]))  # type: ignore[arg-type]
        assert meta.key == env.payload["key"] and meta.headers["event_id"] == env.message_id
        await recording_handler(conn, env, meta)

    consumer = runner(bus_env, kafka, producer, handler, db=db, batch_size=25)
    async with running(consumer):
        await eventually(lambda: consumer.stats.processed == len(firsts) + len(rows))
    ids = await applied(db)
    assert len(ids) == len(set(ids)) and set(ids) == {env.message_id for _, env in firsts + rows}
    for key in keys:
        assert [n for k, n in seen if k == key] == [-1, *range(keys.index(key), 60, len(keys))]  # in order


async def test_a_stop_between_two_members_commits_before_the_pack_so_it_comes_again(
    kafka: EmbeddedKafka, bus_env: str, producer: BusProducer, db: Database
) -> None:
    topic = topic_name(Topic.ALERTS, bus_env)
    rows = [row(topic, "acme:fp-1", n) for n in range(3)]
    [first, *_] = await producer.publish_raw_many([r for r, _ in rows], pack=frozenset({topic}))
    assert isinstance(first, Published)
    tp = TopicPartition(topic, first.partition)
    holder: dict[str, object] = {}

    async def stop_after_the_first(conn: AsyncConnection, env: Envelope, meta: RecordMeta) -> None:
        await recording_handler(conn, env, meta)
        holder["stop"].set()  # type: ignore[attr-defined]  # between the pack's first member and its second

    group = f"g-{uuid.uuid4().hex[:8]}"
    consumer = runner(bus_env, kafka, producer, stop_after_the_first, db=db, group_id=group)
    async with running(consumer) as stop:
        holder["stop"] = stop
        await eventually(lambda: consumer.stats.processed == 1)
    assert await applied(db) == [rows[0][1].message_id]
    assert await committed_offset(kafka, group, tp) == first.offset  # the pack is delivered again

    again = runner(bus_env, kafka, producer, recording_handler, db=db, batch_size=100, group_id=group)
    async with running(again):
        await eventually(lambda: again.stats.processed == 2 and again.stats.duplicates == 1, timeout=40)
    assert await applied(db) == [env.message_id for _, env in rows]  # each once, in order
    assert await committed_offset(kafka, group, tp) == first.offset + 1
