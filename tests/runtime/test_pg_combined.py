"""Inserts and updates written later, with a transaction's next statement
(``pg_fast.write_later``, ``pg_combined``).

What must hold on both backends: a transaction reads what it wrote later, commits it, and a
failed insert fails the transaction; a transaction that rolled back leaves nothing behind,
also not in the next transaction on the same connection. On PostgreSQL the waiting inserts
go to the server in the statement that follows them, unless that statement names one of
their tables (it could not see their rows): then they go first, alone.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from sqlalchemy import bindparam, func, insert, select, update
from sqlalchemy.exc import IntegrityError

from ira.runtime.store import artifacts, pg_fast
from ira.runtime.store.database import Database
from ira.runtime.store.pg_combined import Insert, Update, combined, plain_update, rides_along, values_insert
from ira.runtime.store.schema import artifacts as artifacts_table
from ira.runtime.store.schema import tasks, timers

T0 = datetime(2026, 12, 6, 9, 0, tzinfo=UTC)
_TASK = insert(tasks)
_TIMER = insert(timers)
_TASKS = select(func.count()).select_from(tasks).where(tasks.c.tenant_id == "acme")
_FIRE = update(timers).where(timers.c.timer_id == bindparam("k_timer"), timers.c.fired_at.is_(None)) \
    .values(fired_at=bindparam("v_now"))
_FIRED = select(timers.c.timer_id).where(timers.c.fired_at.is_not(None), timers.c.timer_id.like("up-%"))


def _task(task_id: str) -> dict[str, Any]:
    return {"tenant_id": "acme", "task_id": task_id, "kind": "diagnose", "subject_ref": "incident:i1",
            "created_at": T0}


def _timer(timer_id: str) -> dict[str, Any]:
    return {"tenant_id": "acme", "timer_id": timer_id, "run_id": None, "step_id": None, "kind": "k",
            "due_at": T0, "fired_at": None, "payload": {}}


async def _warm(db: Database) -> None:
    """A statement is planned from its second execution (``plans``): before that it runs at once."""
    for i in range(2):
        async with db.transaction() as conn:
            await conn.execute(_TASK, _task(f"warm{i}"))
            await conn.execute(_TIMER, _timer(f"warm{i}"))
            await conn.execute(_FIRE, {"k_timer": f"warm{i}", "v_now": T0})


async def _count(db: Database) -> int:
    async with db.reader() as conn:
        return int((await conn.execute(_TASKS)).scalar_one())


@pytest.fixture
def sent(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The SQL of every statement the fast path sends to PostgreSQL."""
    seen: list[str] = []
    original = pg_fast.FastConnection._run

    async def run(self: pg_fast.FastConnection, adapted: Any, sql: str, bound: Any, many: bool) -> Any:
        seen.append(sql)
        return await original(self, adapted, sql, bound, many)

    monkeypatch.setattr(pg_fast.FastConnection, "_run", run)
    return seen


async def test_a_transaction_reads_and_commits_what_it_wrote_later(db: Database, sent: list[str]) -> None:
    await _warm(db)
    before = await _count(db)
    sent.clear()
    # When three inserts are written later and the transaction reads their table
    async with db.transaction() as conn:
        for i in range(3):
            await pg_fast.write_later(conn, _TASK, _task(f"t{i}"))
        read = (await conn.execute(_TASKS)).scalar_one()
    statements = list(sent)
    # Then the read saw them, and they were committed
    assert read == before + 3
    assert await _count(db) == before + 3
    if db.dialect == "postgresql":  # the read names their table: they went first, in one statement
        assert [s.split(" ", 1)[0] for s in statements] == ["WITH", "SELECT"]
        assert statements[0].count("INSERT INTO tasks") == 3


async def test_waiting_inserts_ride_in_the_next_statement_that_names_none_of_their_tables(
        db: Database, sent: list[str]) -> None:
    await _warm(db)
    if db.dialect != "postgresql":
        pytest.skip("SQLite runs every statement at once (no round trip to save)")
    sent.clear()
    async with db.transaction() as conn:
        await pg_fast.write_later(conn, _TASK, _task("a"))
        await pg_fast.write_later(conn, _TASK, [_task("b"), _task("c")])  # executemany: one multi-row VALUES
        await conn.execute(_TIMER, _timer("t"))  # names timers only: the tasks ride in it
        await pg_fast.write_later(conn, _TIMER, _timer("u"))
    # Then one statement carried the tasks and the timer, and the last timer went before COMMIT
    assert len(sent) == 2
    assert sent[0].startswith("WITH w0 AS (INSERT INTO tasks") and sent[0].count("INSERT INTO tasks") == 2
    assert sent[0].endswith(")") and "INSERT INTO timers" in sent[0]
    assert sent[1].startswith("INSERT INTO timers")
    async with db.reader() as conn:
        ids = (await conn.execute(select(tasks.c.task_id).where(tasks.c.task_id.in_(["a", "b", "c"])))).scalars()
        assert sorted(ids) == ["a", "b", "c"]


async def test_a_duplicate_written_later_fails_the_transaction(db: Database) -> None:
    await _warm(db)
    async with db.transaction() as conn:
        await conn.execute(_TASK, _task("dup"))
    before = await _count(db)
    with pytest.raises(IntegrityError):
        async with db.transaction() as conn:
            await pg_fast.write_later(conn, _TASK, _task("new"))
            await pg_fast.write_later(conn, _TASK, _task("dup"))  # fails at COMMIT's flush at the latest
    assert await _count(db) == before  # "new" went with it


async def test_a_rolled_back_transaction_leaves_no_waiting_insert_to_the_next_one(db: Database) -> None:
    await _warm(db)
    before = await _count(db)
    with pytest.raises(RuntimeError):
        async with db.transaction() as conn:
            await pg_fast.write_later(conn, _TASK, _task("lost"))
            raise RuntimeError("the block failed")
    # the next transaction (on the kept connection, PostgreSQL) sends only its own
    async with db.transaction() as conn:
        await conn.execute(_TASK, _task("kept"))
    async with db.reader() as conn:
        ids = set((await conn.execute(select(tasks.c.task_id).where(tasks.c.task_id.in_(["lost", "kept"])))).scalars())
    assert ids == {"kept"}
    assert await _count(db) == before + 1


def test_only_a_plain_values_insert_is_queued() -> None:
    assert values_insert("INSERT INTO tasks (a, b) VALUES ($1::VARCHAR, $2::TIMESTAMP WITH TIME ZONE)") == (
        "INSERT INTO tasks (a, b)", "($1::VARCHAR, $2::TIMESTAMP WITH TIME ZONE)", 2, "")
    assert values_insert("INSERT INTO t (a) VALUES ($1::VARCHAR) ON CONFLICT DO NOTHING") == (
        "INSERT INTO t (a)", "($1::VARCHAR)", 1, " ON CONFLICT DO NOTHING")
    for sql in ("INSERT INTO t (a) VALUES ($1::VARCHAR) ON CONFLICT DO NOTHING RETURNING t.a",
                "INSERT INTO t (a) VALUES ($1::VARCHAR) ON CONFLICT (a) DO UPDATE SET a = excluded.a",
                "INSERT INTO t (a) VALUES ($1::VARCHAR) RETURNING t.a",
                "INSERT INTO t (a) SELECT $1::VARCHAR", "INSERT INTO t (a) VALUES ('x')",
                "UPDATE t SET a=$1::VARCHAR"):
        assert values_insert(sql) is None, sql


def test_the_queue_rides_only_in_one_statement_naming_none_of_its_tables() -> None:
    queued = [Insert("INSERT INTO deliveries (a)", "($1::VARCHAR)", 1, [("x",)])]
    assert rides_along("WITH bumped AS (UPDATE runs SET v=$1::INTEGER) SELECT 1", queued)
    assert rides_along("INSERT INTO artifacts (a) VALUES ($1::VARCHAR) ON CONFLICT DO NOTHING RETURNING a", queued)
    assert not rides_along("SELECT deliveries.a FROM deliveries", queued)
    assert not rides_along("WITH RECURSIVE r AS (SELECT 1) SELECT 1", queued)
    assert not rides_along("BEGIN", queued)


def test_combined_numbers_every_part_through_and_keeps_the_last_statements_own_ctes() -> None:
    queued = [Insert("INSERT INTO a (x, y)", "($1::VARCHAR, $2::INTEGER)", 2, [("p", 1), ("q", 2)]),
              Insert("INSERT INTO b (z)", "($1::VARCHAR)", 1, [("r",)], " ON CONFLICT DO NOTHING")]
    sql, values = combined(queued, "WITH c AS (UPDATE d SET v=$1::INTEGER WHERE k=$2::VARCHAR) SELECT $1::INTEGER",
                           (7, "k"))
    assert sql == ("WITH w0 AS (INSERT INTO a (x, y) VALUES ($1::VARCHAR, $2::INTEGER), ($3::VARCHAR, $4::INTEGER)), "
                   "w1 AS (INSERT INTO b (z) VALUES ($5::VARCHAR) ON CONFLICT DO NOTHING), "
                   "c AS (UPDATE d SET v=$6::INTEGER WHERE k=$7::VARCHAR) SELECT $6::INTEGER")
    assert values == ["p", 1, "q", 2, "r", 7, "k"]
    alone, values = combined(queued)
    assert alone == ("WITH w0 AS (INSERT INTO a (x, y) VALUES ($1::VARCHAR, $2::INTEGER), ($3::VARCHAR, $4::INTEGER)) "
                     "INSERT INTO b (z) VALUES ($5::VARCHAR) ON CONFLICT DO NOTHING")
    assert values == ["p", 1, "q", 2, "r"]


async def test_an_artifact_put_without_read_back_is_stored_once_and_read_in_its_transaction(
        db: Database, sent: list[str]) -> None:
    body = b'{"evidence": "p99 tripled"}'
    for _ in range(2):  # planned from the second execution on
        async with db.transaction() as conn:
            await artifacts.put_artifact(conn, "acme", b"warm", media_type="text/plain", max_bytes=1024, at=T0,
                                         read_back=False)
    sent.clear()
    async with db.transaction() as conn:
        ref = await artifacts.put_artifact(conn, "acme", body, media_type="application/json", max_bytes=1024, at=T0,
                                           read_back=False)
        again = await artifacts.put_artifact(conn, "acme", body, media_type="application/json", max_bytes=1024,
                                             at=T0, read_back=False)
        waiting = list(sent)
        _, read = await artifacts.get_artifact(conn, "acme", ref.ref)
    assert (again.ref, read) == (ref.ref, body)
    async with db.transaction() as conn:  # a later put of the same bytes writes nothing new
        await artifacts.put_artifact(conn, "acme", body, media_type="application/json", max_bytes=1024, at=T0,
                                     read_back=False)
    async with db.reader() as conn:
        stored = (await conn.execute(select(func.count()).select_from(artifacts_table).where(
            artifacts_table.c.ref == ref.ref))).scalar_one()
    assert stored == 1
    if db.dialect == "postgresql":  # nothing went to the server until the read needed it
        assert waiting == []


async def test_an_update_written_later_rides_in_the_next_statement_and_is_seen_after_it(
        db: Database, sent: list[str]) -> None:
    await _warm(db)
    async with db.transaction() as conn:
        await conn.execute(_TIMER, _timer("up-1"))
    sent.clear()
    # When a transaction disarms a timer later, then writes a task, then reads the timers
    async with db.transaction() as conn:
        await pg_fast.write_later(conn, _FIRE, {"k_timer": "up-1", "v_now": T0})
        await conn.execute(_TASK, _task("with-update"))
        statements = list(sent)
        fired = list((await conn.execute(_FIRED)).scalars())
    # Then the read saw it, it was committed, and on PostgreSQL it went with the task's insert
    assert fired == ["up-1"]
    async with db.reader() as conn:
        assert list((await conn.execute(_FIRED)).scalars()) == ["up-1"]
    if db.dialect == "postgresql":
        assert len(statements) == 1 and statements[0].startswith("WITH w0 AS (UPDATE timers SET fired_at=")
        assert statements[0].endswith(")") and "INSERT INTO tasks" in statements[0]


async def test_an_update_later_sees_the_rows_written_later_before_it(db: Database, sent: list[str]) -> None:
    """A CTE does not see the rows of the statement's other parts: an UPDATE of a table an
    insert still waits to write goes after it, not beside it, and finds its row; a write after
    a waiting UPDATE of its table goes after it too."""
    await _warm(db)
    async with db.transaction() as conn:
        await conn.execute(_TIMER, _timer("up-4"))
    sent.clear()
    async with db.transaction() as conn:
        await pg_fast.write_later(conn, _TIMER, _timer("up-2"))
        await pg_fast.write_later(conn, _FIRE, {"k_timer": "up-2", "v_now": T0})  # names timers: the insert first
    async with db.transaction() as conn:
        await pg_fast.write_later(conn, _FIRE, {"k_timer": "up-4", "v_now": T0})
        await pg_fast.write_later(conn, _TIMER, _timer("up-3"))  # after a waiting UPDATE of timers: after it
    statements = [s.split(" ", 1)[0] for s in sent]
    async with db.reader() as conn:
        assert sorted((await conn.execute(_FIRED)).scalars()) == ["up-2", "up-4"]
        armed = (await conn.execute(select(timers.c.fired_at).where(timers.c.timer_id == "up-3"))).scalar_one()
    assert armed is None
    if db.dialect == "postgresql":
        assert statements == ["INSERT", "UPDATE", "UPDATE", "INSERT"]


def test_only_an_update_that_returns_nothing_is_queued() -> None:
    assert plain_update("UPDATE timers SET fired_at=$1::TIMESTAMP WITH TIME ZONE WHERE timers.timer_id = $2::VARCHAR")
    for sql in ("UPDATE t SET a=$1::VARCHAR RETURNING t.a", "WITH x AS (SELECT 1) UPDATE t SET a=$1::VARCHAR",
                "UPDATE t SET a=$1::VARCHAR; DELETE FROM t", "INSERT INTO t (a) VALUES ($1::VARCHAR)"):
        assert not plain_update(sql), sql
    queued = [Update("UPDATE work_items SET state=$1::VARCHAR WHERE work_items.run_id = $2::VARCHAR", ("closed", "r"))]
    assert queued[0].table == "work_items"
    assert not rides_along("SELECT work_items.state FROM work_items", queued)
    sql, values = combined([Insert("INSERT INTO a (x)", "($1::VARCHAR)", 1, [("p",)]), *queued],
                           "SELECT $1::INTEGER", (7,))
    assert sql == ("WITH w0 AS (INSERT INTO a (x) VALUES ($1::VARCHAR)), "
                   "w1 AS (UPDATE work_items SET state=$2::VARCHAR WHERE work_items.run_id = $3::VARCHAR) "
                   "SELECT $4::INTEGER")
    assert values == ["p", "closed", "r", 7]
