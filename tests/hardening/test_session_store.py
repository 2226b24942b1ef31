"""The session table on SQLite and PostgreSQL (built through the migrations): open, find,
expire, revoke; the id itself is never stored."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from sqlalchemy import select

from ira.core.clock import FrozenClock
from ira.runtime.session import Sessions
from ira.runtime.store.database import Database
from ira.runtime.store.schema import sessions as sessions_table
from ira.runtime.store.sessions import SessionGrant, digest

GRANT = SessionGrant(tenant_id="demo", principal="admin", token_digest=digest("dev-admin-token"))


async def test_a_session_lives_until_it_expires_or_is_revoked(db: Database) -> None:
    clock = FrozenClock(datetime(2026, 12, 1, 12, tzinfo=UTC))
    sessions = Sessions(db, clock=clock, ttl=timedelta(minutes=30))
    first, second = await sessions.open(GRANT), await sessions.open(GRANT)
    assert first != second and await sessions.find(first) == GRANT
    await sessions.revoke(first)
    assert await sessions.find(first) is None and await sessions.find(second) == GRANT
    clock.advance(timedelta(minutes=30))
    assert await sessions.find(second) is None
    assert await sessions.find("never-issued") is None
    async with db.reader() as conn:
        hashes = {row.session_hash for row in (await conn.execute(select(sessions_table))).all()}
    assert hashes == {digest(first), digest(second)}


async def test_opening_a_session_clears_the_tenants_expired_ones(db: Database) -> None:
    clock = FrozenClock(datetime(2026, 12, 1, 12, tzinfo=UTC))
    sessions = Sessions(db, clock=clock, ttl=timedelta(minutes=30))
    old = await sessions.open(GRANT)
    clock.advance(timedelta(hours=1))
    fresh = await sessions.open(GRANT)
    async with db.reader() as conn:
        hashes = {row.session_hash for row in (await conn.execute(select(sessions_table))).all()}
    assert hashes == {digest(fresh)} and old != fresh
