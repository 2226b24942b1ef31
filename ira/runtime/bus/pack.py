"""Several outbox rows of one topic partition as one Kafka record (a pack), and back.

Why: on an alert storm every alert is a row the relay publishes, and every Kafka record costs
each reader its own round of work whatever it holds (the broker's append and fetch, the
producer's batch entry, aiokafka's decoding, faust's per-event machinery in the noise worker).
A relay pass that claims 200 alert rows sends them as at most one record per partition instead.

What a reader sees does not change: :func:`unpacked` turns a pack back into its members, each a
record of its own with its own key, headers and value (the envelope the row stored), all at the
pack's offset. Per-key order holds because a pack holds only rows bound for the same partition,
in the order they were claimed, and the partition is the one the producer would have chosen for
each member's key alone. A member is done when its handler is; the pack's offset is committed
only after its last member (:attr:`Member.through`), so a stop in the middle delivers the pack
again and the inbox drops the members already applied.

The value starts with :data:`MAGIC` (an envelope starts with ``{``), so any reader can tell a
pack from a record of one envelope by its bytes alone; faust hands the noise worker only values.
Framing, per member: key length (``0xFFFFFFFF`` for none), headers length, value length (three
big-endian unsigned 32-bit ints), then the key (UTF-8), the headers (a JSON object of strings)
and the value. A pack that does not frame exactly is returned as the record it is, and its
reader refuses it as poison like any undecodable record.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ira.runtime.bus.record import RecordShape

MAGIC = b"\x00ira-pack/1\n"
_SIZES = struct.Struct(">III")
_NO_KEY = 0xFFFFFFFF

MAX_MEMBERS = 500
MAX_BYTES = 512 * 1024
"""A pack is closed at this many members or bytes: well inside Kafka's default 1 MB record."""


@dataclass(frozen=True, slots=True)
class PackMember:
    """One row of a pack as it was stored: its own key, headers and value."""

    key: str | None
    headers: Mapping[str, str]
    value: bytes


def is_pack(value: bytes | None) -> bool:
    return value is not None and value.startswith(MAGIC)


def pack(members: Sequence[PackMember]) -> bytes:
    """The value of one record holding ``members`` in order."""
    parts = [MAGIC]
    for m in members:
        key = m.key.encode() if m.key is not None else b""
        headers = json.dumps(dict(m.headers), separators=(",", ":")).encode()
        parts.append(_SIZES.pack(_NO_KEY if m.key is None else len(key), len(headers), len(m.value)))
        parts += (key, headers, m.value)
    return b"".join(parts)


def unpack(value: bytes) -> list[PackMember] | None:
    """The members of a pack, or None if ``value`` is not one that frames exactly."""
    if not is_pack(value):
        return None
    members, at, end = [], len(MAGIC), len(value)
    try:
        while at < end:
            key_len, headers_len, value_len = _SIZES.unpack_from(value, at)
            at += _SIZES.size
            key = None
            if key_len != _NO_KEY:
                key, at = value[at:at + key_len].decode(), at + key_len
            headers = json.loads(value[at:at + headers_len])
            at += headers_len
            body, at = value[at:at + value_len], at + value_len
            if at > end or not isinstance(headers, dict) or not all(
                    isinstance(v, str) for v in headers.values()):
                return None
            members.append(PackMember(key=key, headers=headers, value=body))
    except (struct.error, ValueError):  # ValueError: UnicodeDecodeError and JSONDecodeError
        return None
    return members or None


def packs(members: Iterable[PackMember], *, max_members: int = MAX_MEMBERS,
          max_bytes: int = MAX_BYTES) -> list[list[PackMember]]:
    """``members`` (one partition's, in order) cut into packs within the limits."""
    out: list[list[PackMember]] = []
    size = 0
    for m in members:
        cost = _SIZES.size + len(m.value) + 64 * (1 + len(m.headers))
        if not out or len(out[-1]) >= max_members or (size + cost > max_bytes and out[-1]):
            out.append([])
            size = 0
        out[-1].append(m)
        size += cost
    return out


@dataclass(frozen=True)
class Member(RecordShape):
    """A pack's member in the shape of the consumer record it was packed from (what the
    consumer runner, its parking and its dead letters read), at the pack's offset."""

    through: int
    """The offset done once this member is: the pack's for its last member, the one before
    it for the others (the pack is delivered again unless every member was applied)."""


def through(record: Any) -> int:
    """The last offset of the partition done once ``record`` is."""
    return record.through if isinstance(record, Member) else int(record.offset)


def unpacked(records: Sequence[Any]) -> list[Any]:
    """``records`` with every pack replaced by its members; other records (and a pack that does
    not frame, which its reader refuses as poison) as they are."""
    if not any(is_pack(r.value) for r in records):
        return list(records)
    out: list[Any] = []
    for record in records:
        members = unpack(record.value) if is_pack(record.value) else None
        if members is None:
            out.append(record)
            continue
        last = len(members) - 1
        out += [Member(topic=record.topic, partition=record.partition, offset=record.offset,
                       timestamp=record.timestamp,
                       key=m.key.encode() if m.key is not None else None, value=m.value,
                       headers=tuple((k, v.encode()) for k, v in m.headers.items()),
                       through=record.offset if i == last else record.offset - 1)
                for i, m in enumerate(members)]
    return out
