"""Dashboard sessions in SQL: an opaque random id in the cookie, its SHA-256 in the table.

A session names the API token that logged in by the token's digest, not the principal's
roles: the grant is read from the configuration on every request, so a token removed from
``api_tokens`` ends its sessions and a changed role applies at once.
"""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import delete, insert, select, update
from sqlalchemy.ext.asyncio import AsyncConnection

from ira.runtime.store.schema import sessions

SESSION_ID_BYTES = 32


@dataclass(frozen=True)
class SessionGrant:
    """What a live session stands for."""

    tenant_id: str
    principal: str
    token_digest: str


def digest(value: str) -> str:
    """SHA-256 hex of a secret: what the table keeps instead of the secret itself."""
    return hashlib.sha256(value.encode("utf-8", "surrogateescape")).hexdigest()


async def open_session(conn: AsyncConnection, grant: SessionGrant, *, at: datetime, ttl: timedelta) -> str:
    """A new session for ``grant``, valid for ``ttl``; returns the id the cookie carries.

    The tenant's expired sessions go in the same transaction, so the table holds live ones and
    those revoked within a ttl, however many logins there were."""
    session_id = secrets.token_urlsafe(SESSION_ID_BYTES)
    await conn.execute(delete(sessions).where(sessions.c.tenant_id == grant.tenant_id, sessions.c.expires_at <= at))
    await conn.execute(insert(sessions).values(
        tenant_id=grant.tenant_id, session_hash=digest(session_id), principal=grant.principal,
        token_digest=grant.token_digest, created_at=at, expires_at=at + ttl))
    return session_id


async def live_session(conn: AsyncConnection, session_id: str, *, at: datetime) -> SessionGrant | None:
    """The session's grant unless it is unknown, expired or revoked."""
    row = (await conn.execute(select(sessions).where(
        sessions.c.session_hash == digest(session_id), sessions.c.revoked_at.is_(None),
        sessions.c.expires_at > at))).first()
    return SessionGrant(row.tenant_id, row.principal, row.token_digest) if row else None


async def revoke_session(conn: AsyncConnection, session_id: str, *, at: datetime) -> None:
    """The session stops working now (logout); unknown ids are ignored."""
    await conn.execute(update(sessions).where(
        sessions.c.session_hash == digest(session_id), sessions.c.revoked_at.is_(None)).values(revoked_at=at))
