"""GroupCommit: concurrent callers share transactions and each hears its own outcome."""

from __future__ import annotations

import asyncio

import pytest
from sqlalchemy import func, select

from ira.core.clock import SystemClock
from ira.runtime.store.database import Database
from ira.runtime.store.group_commit import GroupCommit
from ira.runtime.store.schema import outbox
from tests.runtime.test_resend import message


async def test_callers_of_one_turn_share_a_transaction_and_learn_what_they_wrote(db: Database) -> None:
    commits = GroupCommit(db, SystemClock())
    shared = message(message_id="shared")
    answers = await asyncio.gather(*(commits.enqueue_new([message(message_id=f"m{n}"), shared]) for n in range(50)))
    assert commits.commits < 50
    assert answers[0] == {("acme", "m0"), ("acme", "shared")}  # the first to bring "shared" wrote it
    assert all(answer == {("acme", f"m{n}")} for n, answer in enumerate(answers) if n)
    async with db.reader() as conn:
        assert (await conn.execute(select(func.count()).select_from(outbox))).scalar() == 51


async def test_a_row_the_database_refuses_fails_only_its_own_caller(db: Database) -> None:
    if db.dialect == "sqlite":
        pytest.skip("SQLite enforces no column lengths: nothing to refuse")
    commits = GroupCommit(db, SystemClock())
    too_long = message(message_id="bad", awaits="x" * 500)  # awaits is VARCHAR(100)
    answers = await asyncio.gather(commits.enqueue_new([message(message_id="good-1")]),
                                   commits.enqueue_new([too_long]),
                                   commits.enqueue_new([message(message_id="good-2")]), return_exceptions=True)
    assert answers[0] == {("acme", "good-1")} and answers[2] == {("acme", "good-2")}
    assert isinstance(answers[1], Exception) and not isinstance(answers[1], asyncio.CancelledError)
