"""Content-addressed artifacts: evidence, reports, drafts. Stored once per tenant and hash;
reads are tenant-scoped, so a ref leaked across tenants finds nothing."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import insert, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncConnection

from ira.core.artifact import ArtifactRef, content_hash
from ira.core.errors import ArtifactTooLargeError, NotFoundError
from ira.runtime.store.schema import artifacts


async def put_artifact(
    conn: AsyncConnection, tenant_id: str, body: bytes, *, media_type: str, max_bytes: int, at: datetime
) -> ArtifactRef:
    """Store ``body`` (idempotent: the same bytes give the same ref) and return its ref."""
    if len(body) > max_bytes:
        raise ArtifactTooLargeError(f"artifact of {len(body)} bytes exceeds the {max_bytes}-byte limit")
    ref = content_hash(body)
    try:
        async with conn.begin_nested():
            await conn.execute(insert(artifacts).values(
                tenant_id=tenant_id, ref=ref, media_type=media_type, size=len(body), body=body, created_at=at))
    except IntegrityError:
        return (await get_artifact(conn, tenant_id, ref))[0]
    return ArtifactRef(tenant_id=tenant_id, ref=ref, media_type=media_type, size=len(body), created_at=at)


async def get_artifact(conn: AsyncConnection, tenant_id: str, ref: str) -> tuple[ArtifactRef, bytes]:
    row = (await conn.execute(
        select(artifacts).where(artifacts.c.tenant_id == tenant_id, artifacts.c.ref == ref))).first()
    if row is None:
        raise NotFoundError(f"artifact {ref} not found")
    meta = ArtifactRef(tenant_id=row.tenant_id, ref=row.ref, media_type=row.media_type, size=row.size,
                       created_at=row.created_at)
    return meta, bytes(row.body)
