"""A bounded in-process cache of artifacts, per database.

Artifacts are content-addressed and never updated or deleted, so a committed artifact read
once stays true: a run reads the same evidence, drafts and observations again in several
steps, and each read was a statement. The cache holds only committed rows (a write
transaction's artifacts enter it once that transaction committed), is keyed by
``(tenant_id, ref)`` so another tenant's ref still finds nothing, and is bounded by the bytes
it holds (least recently used first out). One cache per engine: two databases in one
process (tests, tools) never see each other's artifacts.
"""

from __future__ import annotations

import threading
import weakref
from collections import OrderedDict

from sqlalchemy.engine import Engine
from sqlalchemy.ext.asyncio import AsyncConnection

from ira.core.artifact import ArtifactRef
from ira.runtime.store.database import after_commit, is_reader

MAX_BYTES = 16 * 1024 * 1024
"""What one database's cache holds at most (bodies); 10,000 waiting runs must stay small."""
MAX_ENTRY_BYTES = 256 * 1024
"""Larger artifacts are read from SQL each time: one would push out hundreds of small ones."""

Entry = tuple[ArtifactRef, bytes]


class ArtifactCache:
    """A bytes-bounded LRU of ``(tenant_id, ref) -> (meta, body)``; thread-safe."""

    def __init__(self, *, max_bytes: int = MAX_BYTES, max_entry_bytes: int = MAX_ENTRY_BYTES) -> None:
        self._entries: OrderedDict[tuple[str, str], Entry] = OrderedDict()
        self._bytes = 0
        self._max_bytes, self._max_entry_bytes = max_bytes, max_entry_bytes
        self._lock = threading.Lock()

    def get(self, tenant_id: str, ref: str) -> Entry | None:
        with self._lock:
            entry = self._entries.get((tenant_id, ref))
            if entry is not None:
                self._entries.move_to_end((tenant_id, ref))
            return entry

    def put(self, meta: ArtifactRef, body: bytes) -> None:
        if len(body) > self._max_entry_bytes:
            return
        key = (meta.tenant_id, meta.ref)
        with self._lock:
            if key in self._entries:
                self._entries.move_to_end(key)
                return
            self._entries[key] = (meta, body)
            self._bytes += len(body)
            while self._bytes > self._max_bytes:
                _, (_, evicted) = self._entries.popitem(last=False)
                self._bytes -= len(evicted)

    @property
    def size_bytes(self) -> int:
        return self._bytes


_CACHES: weakref.WeakKeyDictionary[Engine, ArtifactCache] = weakref.WeakKeyDictionary()
_CACHES_LOCK = threading.Lock()


def cache_of(conn: AsyncConnection) -> ArtifactCache:
    """The cache of ``conn``'s database."""
    engine = conn.sync_engine
    with _CACHES_LOCK:
        cache = _CACHES.get(engine)
        if cache is None:
            cache = _CACHES[engine] = ArtifactCache()
        return cache


def remember(conn: AsyncConnection, meta: ArtifactRef, body: bytes) -> None:
    """Cache an artifact ``conn`` wrote or read, once it is known to be committed: after the
    write transaction commits, at once for a reader; never for a connection that can't tell."""
    cache = cache_of(conn)
    if is_reader(conn):
        cache.put(meta, body)
    else:
        after_commit(conn, lambda: cache.put(meta, body))
