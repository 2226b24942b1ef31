"""Content-addressed artifacts: evidence, reports, drafts. Stored once per tenant and hash;
reads are tenant-scoped, so a ref leaked across tenants finds nothing.

Never updated or deleted, so committed artifacts are served from a bounded in-process cache
(``artifact_cache``), and a repeated put of the same bytes is ``INSERT .. ON CONFLICT DO
NOTHING`` (no savepoint), or nothing at all when the cache already holds them.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import bindparam, select
from sqlalchemy.dialects import postgresql
from sqlalchemy.ext.asyncio import AsyncConnection

from ira.core.artifact import ArtifactRef, content_hash
from ira.core.errors import ArtifactTooLargeError, NotFoundError
from ira.runtime.store.artifact_cache import cache_of, remember
from ira.runtime.store.new_rows import InsertNew
from ira.runtime.store.pg_fast import write_later
from ira.runtime.store.schema import artifacts

_INSERT = InsertNew(artifacts, artifacts.c.ref)
_INSERT_LATER = postgresql.insert(artifacts).on_conflict_do_nothing()
"""PostgreSQL: an artifact whose first put's metadata is not read back (``read_back=False``)."""
_SELECT = select(artifacts).where(artifacts.c.tenant_id == bindparam("k_tenant"), artifacts.c.ref == bindparam("k_ref"))


async def put_artifact(
    conn: AsyncConnection, tenant_id: str, body: bytes, *, media_type: str, max_bytes: int, at: datetime,
    read_back: bool = True,
) -> ArtifactRef:
    """Store ``body`` (idempotent: the same bytes give the same ref, and the first put's
    metadata) and return its ref. ``read_back=False``: where the caller needs only the ref, the
    metadata returned is this put's (media type, time) even if the bytes were stored before,
    and on PostgreSQL the INSERT goes with the transaction's next statement
    (``pg_fast.write_later``) instead of on its own."""
    if len(body) > max_bytes:
        raise ArtifactTooLargeError(f"artifact of {len(body)} bytes exceeds the {max_bytes}-byte limit")
    ref = content_hash(body)
    if (cached := cache_of(conn).get(tenant_id, ref)) is not None:
        return cached[0]
    meta = ArtifactRef(tenant_id=tenant_id, ref=ref, media_type=media_type, size=len(body), created_at=at)
    if not read_back and conn.dialect.name == "postgresql":
        await write_later(conn, _INSERT_LATER, {"tenant_id": tenant_id, "ref": ref, "media_type": media_type,
                                                "size": len(body), "body": body, "created_at": at})
        remember(conn, meta, body)
        return meta
    inserted = (await conn.execute(_INSERT.on(conn), {
        "tenant_id": tenant_id, "ref": ref, "media_type": media_type, "size": len(body), "body": body,
        "created_at": at})).first()
    if inserted is None:
        return (await get_artifact(conn, tenant_id, ref))[0]
    remember(conn, meta, body)
    return meta


async def get_artifact(conn: AsyncConnection, tenant_id: str, ref: str) -> tuple[ArtifactRef, bytes]:
    if (cached := cache_of(conn).get(tenant_id, ref)) is not None:
        return cached
    row = (await conn.execute(_SELECT, {"k_tenant": tenant_id, "k_ref": ref})).first()
    if row is None:
        raise NotFoundError(f"artifact {ref} not found")
    meta = ArtifactRef(tenant_id=row.tenant_id, ref=row.ref, media_type=row.media_type, size=row.size,
                       created_at=row.created_at)
    body = bytes(row.body)
    remember(conn, meta, body)
    return meta, body
