"""The inbox: a consumer's durable memory of which messages it already applied.

Written in the same transaction as the effect, so "applied" and "remembered" cannot diverge:
a redelivered message finds its row and is dropped.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import insert
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncConnection

from ira.core.errors import DuplicateMessageError
from ira.runtime.store.schema import inbox


async def record_inbox(
    conn: AsyncConnection, *, tenant_id: str, consumer: str, message_id: str, at: datetime
) -> None:
    """Remember ``message_id`` for ``consumer``; raise DuplicateMessageError if it is known.

    A savepoint keeps the surrounding transaction usable after the unique violation (needed
    on PostgreSQL, where an error aborts the whole transaction).
    """
    try:
        async with conn.begin_nested():
            await conn.execute(
                insert(inbox).values(tenant_id=tenant_id, consumer=consumer, message_id=message_id, received_at=at)
            )
    except IntegrityError as exc:
        raise DuplicateMessageError(f"{consumer} already applied {message_id}") from exc
