"""The inbox: a consumer's durable memory of which messages it already applied.

Written in the same transaction as the effect, so "applied" and "remembered" cannot diverge:
a redelivered message finds its row and is dropped.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy.ext.asyncio import AsyncConnection

from ira.core.errors import DuplicateMessageError
from ira.runtime.store.new_rows import InsertNew
from ira.runtime.store.schema import inbox


async def record_inbox(
    conn: AsyncConnection, *, tenant_id: str, consumer: str, message_id: str, at: datetime
) -> None:
    """Remember ``message_id`` for ``consumer``; raise DuplicateMessageError if it is known.

    ``INSERT .. ON CONFLICT DO NOTHING RETURNING``: a known message inserts nothing and raises
    no database error, so the surrounding transaction stays usable without a savepoint (an
    error would abort the whole transaction on PostgreSQL).
    """
    result = await conn.execute(_INSERT.on(conn), {
        "tenant_id": tenant_id, "consumer": consumer, "message_id": message_id, "received_at": at})
    if result.first() is None:
        raise DuplicateMessageError(f"{consumer} already applied {message_id}")


_INSERT = InsertNew(inbox, inbox.c.message_id)
