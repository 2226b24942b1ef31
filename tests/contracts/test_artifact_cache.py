"""Artifacts served from the in-process cache: only committed rows, still tenant-scoped, bounded."""

from __future__ import annotations

import pytest

from ira.core.artifact import ArtifactRef
from ira.core.errors import NotFoundError
from ira.runtime.store import artifacts
from ira.runtime.store.artifact_cache import ArtifactCache
from ira.runtime.store.database import Database
from tests.contracts.test_store import T0
from tests.store_fixtures import statements

JSON = "application/json"


async def test_a_committed_artifact_is_read_and_put_again_without_sql_but_only_by_its_tenant(db: Database) -> None:
    async with db.transaction() as conn:
        ref = await artifacts.put_artifact(conn, "acme", b'{"a": 1}', media_type=JSON, max_bytes=100, at=T0)
    with statements(db) as seen:
        async with db.reader() as conn:
            assert await artifacts.get_artifact(conn, "acme", ref.ref) == (ref, b'{"a": 1}')
        async with db.transaction() as conn:
            again = await artifacts.put_artifact(conn, "acme", b'{"a": 1}', media_type="text/plain", max_bytes=100,
                                                 at=T0)
    assert again == ref  # the first put's metadata
    assert not [s for s in seen if "artifacts" in s]
    async with db.reader() as conn:
        with pytest.raises(NotFoundError):
            await artifacts.get_artifact(conn, "globex", ref.ref)


async def test_an_artifact_of_a_rolled_back_transaction_is_not_found(db: Database) -> None:
    with pytest.raises(RuntimeError):
        async with db.transaction() as conn:
            ref = await artifacts.put_artifact(conn, "acme", b"gone", media_type=JSON, max_bytes=100, at=T0)
            assert (await artifacts.get_artifact(conn, "acme", ref.ref))[1] == b"gone"  # its own write
            raise RuntimeError("rolled back")
    async with db.reader() as conn:
        with pytest.raises(NotFoundError):
            await artifacts.get_artifact(conn, "acme", ref.ref)


async def test_a_second_put_of_the_same_bytes_in_one_transaction_keeps_it_usable(db: Database) -> None:
    async with db.transaction() as conn:
        first = await artifacts.put_artifact(conn, "acme", b"twice", media_type=JSON, max_bytes=100, at=T0)
        second = await artifacts.put_artifact(conn, "acme", b"twice", media_type=JSON, max_bytes=100, at=T0)
        other = await artifacts.put_artifact(conn, "globex", b"twice", media_type=JSON, max_bytes=100, at=T0)
    assert first == second and other.tenant_id == "globex"
    async with db.reader() as conn:
        assert (await artifacts.get_artifact(conn, "globex", other.ref))[1] == b"twice"


def _meta(ref: str, size: int) -> ArtifactRef:
    return ArtifactRef(tenant_id="acme", ref=ref, media_type=JSON, size=size, created_at=T0)


def test_the_cache_drops_the_least_recently_used_past_its_bytes_and_skips_large_bodies() -> None:
    cache = ArtifactCache(max_bytes=30, max_entry_bytes=12)
    for name in ("a", "b", "c"):
        cache.put(_meta(name, 10), name.encode() * 10)
    assert cache.get("acme", "a") is not None  # now the most recently used
    cache.put(_meta("d", 10), b"d" * 10)
    cache.put(_meta("big", 13), b"x" * 13)
    assert [n for n in ("a", "b", "c", "d", "big") if cache.get("acme", n)] == ["a", "c", "d"]
    assert cache.size_bytes == 30
    assert cache.get("globex", "a") is None
