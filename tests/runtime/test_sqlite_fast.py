"""A SQLite write transaction runs a statement it saw before from its compiled plan (sqlite_fast).

What must hold: the plan's rows, types (aware datetimes, decoded JSON), keys, rowcount and
errors are SQLAlchemy's; what the plan cannot express (a caller's ``IN`` list, connection
events) takes SQLAlchemy's path and still works.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from sqlalchemy import (
    JSON,
    Column,
    Integer,
    MetaData,
    String,
    Table,
    bindparam,
    desc,
    insert,
    select,
    union_all,
    update,
)
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import engine as sa_asyncio_engine

from ira.runtime.store import plans, sqlite_fast
from ira.runtime.store.database import Database
from ira.runtime.store.schema import UtcDateTime
from tests.store_fixtures import statements

_meta = MetaData()
things = Table(
    "fast_things", _meta,
    Column("id", String(16), primary_key=True),
    Column("state", String(16), nullable=False),
    Column("n", Integer, nullable=False),
    Column("at", UtcDateTime(), nullable=False),
    Column("data", JSON, nullable=False),
)
INSERT = insert(things)
BY_ID = select(things).where(things.c.id == bindparam("k_id"))
LIVE = select(things.c.id, things.c.n).where(things.c.state.in_(("new", "open"))).order_by(things.c.id)
AMONG = select(things.c.id).where(things.c.id.in_(bindparam("ids", expanding=True))).order_by(things.c.id)
INSERT_NEW = sqlite_insert(things).on_conflict_do_nothing().returning(things.c.id)
EITHER = union_all(select(things.c.id, things.c.n).where(things.c.id == bindparam("k_id")),
                   select(things.c.id, things.c.n).where(things.c.state == bindparam("k_state"))).order_by(desc("id"))
BUMP = update(things).where(things.c.state == "open").values(n=things.c.n + bindparam("by"))
T0 = datetime(2026, 12, 3, 12, 0, tzinfo=UTC)


def _row(i: int, state: str = "open") -> dict[str, object]:
    return {"id": f"t{i}", "state": state, "n": i, "at": T0 + timedelta(seconds=i), "data": {"i": i, "tags": ["a"]}}


@pytest.fixture
async def sqlite_db(tmp_path: Path) -> AsyncIterator[Database]:
    db = Database.create(f"sqlite:///{tmp_path / 'fast.db'}")
    async with db.transaction() as conn:
        await conn.run_sync(_meta.create_all)
    yield db
    await db.close()


def _planned(statement: object) -> bool:
    return any(known[0] is statement and known[1] is not None for known in sqlite_fast._PLANS.plans.values())


async def test_a_statement_seen_again_runs_from_its_plan_with_sqlalchemys_rows(sqlite_db: Database) -> None:
    async with sqlite_db.transaction() as conn:
        for i in range(3):
            await conn.execute(INSERT, _row(i))
        first = (await conn.execute(BY_ID, {"k_id": "t1"})).one()
        again = (await conn.execute(BY_ID, {"k_id": "t1"})).one()
    assert _planned(BY_ID) and _planned(INSERT)
    assert again == first and again._fields == first._fields
    assert again.at == T0 + timedelta(seconds=1) and again.at.tzinfo is not None
    assert again.data == {"i": 1, "tags": ["a"]}
    async with sqlite_db.reader() as conn:  # what the plans wrote, read through SQLAlchemy
        assert (await conn.execute(select(things.c.id).order_by(things.c.id))).scalars().all() == ["t0", "t1", "t2"]


async def test_a_planned_update_reports_its_rowcount(sqlite_db: Database) -> None:
    async with sqlite_db.transaction() as conn:
        await conn.execute(INSERT, [_row(1), _row(2), _row(3, state="done")])
        counts = [(await conn.execute(BUMP, {"by": 10})).rowcount for _ in range(3)]
        assert counts == [2, 2, 2] and _planned(BUMP)
        assert (await conn.execute(LIVE)).all() == [("t1", 31), ("t2", 32)]
        assert (await conn.execute(LIVE)).all() == [("t1", 31), ("t2", 32)] and _planned(LIVE)


async def test_a_planned_insert_of_a_taken_key_raises_sqlalchemys_integrity_error(sqlite_db: Database) -> None:
    async with sqlite_db.transaction() as conn:
        await conn.execute(INSERT, _row(1))
        await conn.execute(INSERT, _row(2))
        assert _planned(INSERT)
    with pytest.raises(IntegrityError):
        async with sqlite_db.transaction() as conn:
            await conn.execute(INSERT, _row(3))
            await conn.execute(INSERT, _row(1))
    async with sqlite_db.reader() as conn:  # the failed transaction left nothing
        assert (await conn.execute(select(things.c.id).order_by(things.c.id))).scalars().all() == ["t1", "t2"]


async def test_executemany_through_a_plan_writes_every_row(sqlite_db: Database) -> None:
    async with sqlite_db.transaction() as conn:
        await conn.execute(INSERT, [_row(1), _row(2)])
        await conn.execute(INSERT, [_row(3), _row(4)])
    async with sqlite_db.transaction() as conn:
        assert [r.id for r in (await conn.execute(LIVE)).all()] == ["t1", "t2", "t3", "t4"]


async def test_several_rows_with_returning_run_the_single_row_plan_once_each(sqlite_db: Database) -> None:
    async with sqlite_db.transaction() as conn:
        first = (await conn.execute(INSERT_NEW, [_row(1), _row(2)])).scalars().all()
        again = (await conn.execute(INSERT_NEW, [_row(2), _row(3), _row(4)]))
        assert _planned(INSERT_NEW)
        assert sorted(first) == ["t1", "t2"] and again.scalars().all() == ["t3", "t4"]  # t2 was there: no row
        refused = await conn.execute(INSERT_NEW, [_row(1), _row(4)])
        assert refused.scalars().all() == [] and refused.rowcount == 0
    async with sqlite_db.reader() as conn:
        ids = (await conn.execute(select(things.c.id).order_by(things.c.id))).scalars().all()
    assert ids == ["t1", "t2", "t3", "t4"]


async def test_a_union_runs_from_its_plan(sqlite_db: Database) -> None:
    async with sqlite_db.transaction() as conn:
        await conn.execute(INSERT, [_row(1), _row(2, state="done"), _row(3, state="done")])
        first = (await conn.execute(EITHER, {"k_id": "t1", "k_state": "done"})).all()
        again = (await conn.execute(EITHER, {"k_id": "t2", "k_state": "done"})).all()
    assert _planned(EITHER)
    assert first == [("t3", 3), ("t2", 2), ("t1", 1)] and again == [("t3", 3), ("t2", 2), ("t2", 2)]


async def test_a_callers_in_list_takes_sqlalchemys_path(sqlite_db: Database) -> None:
    async with sqlite_db.transaction() as conn:
        await conn.execute(INSERT, [_row(1), _row(2), _row(3)])
        assert (await conn.execute(AMONG, {"ids": ["t1", "t3"]})).scalars().all() == ["t1", "t3"]
        assert (await conn.execute(AMONG, {"ids": ["t2"]})).scalars().all() == ["t2"]
    assert not _planned(AMONG)


async def test_statement_listeners_see_every_statement(sqlite_db: Database) -> None:
    async with sqlite_db.transaction() as conn:
        await conn.execute(BY_ID, {"k_id": "t1"})
        await conn.execute(BY_ID, {"k_id": "t1"})
    with statements(sqlite_db) as seen:
        async with sqlite_db.transaction() as conn:
            await conn.execute(BY_ID, {"k_id": "t1"})
            await conn.execute(BY_ID, {"k_id": "t2"})
    assert len([s for s in seen if s.startswith("SELECT fast_things.id")]) == 2


def test_a_plans_parameters_are_sqlalchemys_for_every_kind_of_source(sqlite_db: Database) -> None:
    """The plan's generated ``row`` gives the positional parameters SQLAlchemy's execution context
    builds: the caller's values through their type's processor (aware datetime, JSON) or none
    (String, Integer, None passed as is), the statement's own bound value, a callable's value."""
    dialect = sqlite_db.engine.sync_engine.dialect
    statement = update(things).where(things.c.id == bindparam("k_id"), things.c.state == "open").values(
        n=bindparam("n"), at=bindparam("at"), data=bindparam("data"),
        state=bindparam("new_state", callable_=lambda: "called"))
    params = {"k_id": "t1", "n": None, "at": T0 + timedelta(hours=1), "data": {"a": [1, None]}}
    _, plan = plans._compile(statement, dialect, frozenset(params), params, False, False)
    assert plan is not None and {kind for kind, _, _ in plan.values} == {0, 1, 2}
    compiled = statement.compile(dialect=dialect, column_keys=sorted(params))
    constructed = compiled.construct_params(params)
    processors = compiled._bind_processors
    assert compiled.positiontup is not None
    expected = tuple(processors[name](constructed[name]) if name in processors else constructed[name]
                     for name in compiled.positiontup)
    assert plan.row(params) == expected
    assert [type(v) for v in plan.row(params)] == [type(v) for v in expected]
    assert plan.row({**params, "k_id": "t2"})[-2:] == ("t2", "open")
    listed = {"ids": ["t3", "t1", "t2"]}  # a caller's IN list, planned per length (PostgreSQL's plans)
    _, by_list = plans._compile(AMONG, dialect, frozenset(listed), listed, False, True)
    assert by_list is not None and {kind for kind, _, _ in by_list.values} == {3}
    assert by_list.row(listed) == ("t3", "t1", "t2") and by_list.row({"ids": ["x", "y", "z"]}) == ("x", "y", "z")


async def test_a_planned_result_reads_as_sqlalchemys_in_every_way_the_store_reads_it(sqlite_db: Database) -> None:
    """The row maker a plan built once serves every result of it, and goes where SQLAlchemy's
    own would: a result narrowed by ``columns()`` or read as mappings or scalars makes its own."""
    async with sqlite_db.transaction() as conn:
        await conn.execute(INSERT, [_row(1), _row(2), _row(3, state="done")])
        for _ in range(2):
            await conn.execute(LIVE)
        assert _planned(LIVE)
        assert (await conn.execute(LIVE)).first() == ("t1", 1)
        assert [tuple(r) for r in await conn.execute(LIVE)] == [("t1", 1), ("t2", 2)]
        assert (await conn.execute(LIVE)).columns("n").all() == [(1,), (2,)]
        assert (await conn.execute(LIVE)).mappings().all() == [{"id": "t1", "n": 1}, {"id": "t2", "n": 2}]
        assert (await conn.execute(LIVE)).scalars("n").all() == [1, 2]
        assert (await conn.execute(LIVE)).scalar() == "t1"
        one = (await conn.execute(BY_ID, {"k_id": "t3"})).one()
        assert one.at == T0 + timedelta(seconds=3) and one.data == {"i": 3, "tags": ["a"]}
        assert (await conn.execute(BY_ID, {"k_id": "nope"})).first() is None


async def test_a_write_transaction_of_planned_statements_spawns_no_greenlet(
        sqlite_db: Database, monkeypatch: pytest.MonkeyPatch) -> None:
    """Inline, where nothing awaits, neither SQLAlchemy's begin and commit nor a planned statement
    runs in a greenlet (each one a greenlet made and two switches of the event loop's thread);
    its writes still commit."""
    async with sqlite_db.transaction() as conn:
        for i in range(2):
            await conn.execute(INSERT, _row(i))
            await conn.execute(BY_ID, {"k_id": f"t{i}"})
    spawned: list[object] = []
    spawn = sa_asyncio_engine.greenlet_spawn

    async def counted(fn, *args, **kwargs):  # type: ignore[no-untyped-def]
        spawned.append(fn)
        return await spawn(fn, *args, **kwargs)

    monkeypatch.setattr(sa_asyncio_engine, "greenlet_spawn", counted)
    async with sqlite_db.transaction() as conn:
        await conn.execute(INSERT, _row(5))
        assert (await conn.execute(BY_ID, {"k_id": "t5"})).one().n == 5
    assert spawned == []
    async with sqlite_db.reader() as conn:
        assert (await conn.execute(select(things.c.id).where(things.c.id == "t5"))).scalar() == "t5"
