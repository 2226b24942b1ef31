"""Group commit: the outbox writes of concurrent callers in shared transactions.

A webhook under load has dozens of requests that must each see their events committed before
they answer. One transaction per request would make the database's commit (the single writer
lock on SQLite, a WAL flush on PostgreSQL) the limit of the gateway's rate. Here, while one
transaction is in flight the next callers queue, and the next transaction writes all of them
in arrival order; each caller hears its own outcome: which of its messages were new to the
outbox, or StoreUnavailableError. With no load a caller waits for nothing but its own commit.

A shared transaction that fails for another reason than an unreachable database (a row the
database refuses) is retried once per caller, so one request's bad row never fails the others.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import timedelta

from sqlalchemy.exc import DBAPIError, InterfaceError, OperationalError

from ira.core.clock import Clock
from ira.core.commit import OutboxMessage
from ira.core.errors import StoreUnavailableError
from ira.runtime.store import outbox
from ira.runtime.store.database import Database
from ira.runtime.store.outbox import MessageKey

log = logging.getLogger(__name__)

MAX_MESSAGES_PER_COMMIT = 5000
"""A bound on one transaction's size, so a burst of 100-alert requests commits in a few."""


@dataclass(frozen=True)
class _Waiting:
    messages: Sequence[OutboxMessage]
    answer: asyncio.Future[set[MessageKey]]


def is_unreachable(exc: BaseException) -> bool:
    """The database did not answer (down, cut off, locked past the timeout): retrying now is
    pointless, later may work. Anything else is a refusal of what was written."""
    if isinstance(exc, OperationalError | InterfaceError | OSError | TimeoutError):
        return True
    return isinstance(exc, DBAPIError) and exc.connection_invalidated


class GroupCommit:
    """``enqueue_new`` for many concurrent callers, one transaction at a time (module doc)."""

    def __init__(self, db: Database, clock: Clock, *, timeout: timedelta = timedelta(seconds=5)) -> None:
        self._db, self._clock, self._timeout = db, clock, timeout
        self._waiting: list[_Waiting] = []
        self._committer: asyncio.Task[None] | None = None
        self.commits = 0
        """Transactions committed so far (fewer than callers when callers shared them)."""

    async def enqueue_new(self, messages: Sequence[OutboxMessage]) -> set[MessageKey]:
        """Commit the messages the outbox does not hold yet; returns the keys this call wrote
        (a key written by an earlier caller of the same transaction counts as theirs)."""
        if not messages:
            return set()
        answer: asyncio.Future[set[MessageKey]] = asyncio.get_running_loop().create_future()
        self._waiting.append(_Waiting(list(messages), answer))
        if self._committer is None:
            self._committer = asyncio.create_task(self._commit_while_waiting(), name="outbox-group-commit")
        return await answer

    async def _commit_while_waiting(self) -> None:
        try:
            while self._waiting:
                await self._commit(self._take())
        except asyncio.CancelledError:  # the process is stopping: nobody is left to answer them
            _fail(self._waiting, _stopped)
            self._waiting.clear()
            raise
        finally:
            self._committer = None

    def _take(self) -> list[_Waiting]:
        taken, size = 1, len(self._waiting[0].messages)
        while taken < len(self._waiting) and size + len(self._waiting[taken].messages) <= MAX_MESSAGES_PER_COMMIT:
            size += len(self._waiting[taken].messages)
            taken += 1
        batch = self._waiting[:taken]
        del self._waiting[:taken]
        return batch

    async def _commit(self, batch: list[_Waiting]) -> None:
        try:
            written = await self._transaction([m for w in batch for m in w.messages])
        except asyncio.CancelledError:
            _fail(batch, _stopped)
            raise
        except Exception as exc:
            await self._failed(batch, exc)
            return
        for waiting in batch:
            mine = {key for key in map(_key, waiting.messages) if key in written}
            written -= mine  # the first caller to bring a key wrote it; later ones find it stored
            if not waiting.answer.done():  # else its request was cancelled: its rows are stored anyway
                waiting.answer.set_result(mine)

    async def _failed(self, batch: list[_Waiting], exc: Exception) -> None:
        if is_unreachable(exc):
            log.warning("outbox group commit of %d caller(s) failed: %r", len(batch), exc)
            reason = f"database: {type(exc).__name__}: {exc}"[:300]
            _fail(batch, lambda: StoreUnavailableError(reason, retry_after=timedelta(seconds=1)))
        elif len(batch) == 1:
            _fail(batch, lambda: exc)
        else:  # somebody's row was refused: each caller alone, so only that one hears it
            for waiting in batch:
                await self._commit([waiting])

    async def _transaction(self, messages: list[OutboxMessage]) -> set[MessageKey]:
        async with asyncio.timeout(self._timeout.total_seconds()), self._db.transaction() as conn:
            written = await outbox.enqueue_new(conn, messages, at=self._clock.now())
        self.commits += 1
        return written


def _key(message: OutboxMessage) -> MessageKey:
    return message.envelope.tenant_id, message.envelope.message_id


def _stopped() -> BaseException:
    return StoreUnavailableError("the store's group commit stopped", retry_after=timedelta(seconds=1))


def _fail(batch: Sequence[_Waiting], error: Callable[[], BaseException]) -> None:
    """Each waiting caller raises an error of its own (one exception object per traceback)."""
    for waiting in batch:
        if not waiting.answer.done():
            waiting.answer.set_exception(error())
