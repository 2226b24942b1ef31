"""A run commit's events written by its compare-and-set (PostgreSQL, ``store/folded_cas.py``):
numbered after the run's ``last_seq``, masked, stored as drafted; a refused compare-and-set
writes none. SQLite keeps its separate INSERT; both must store the same log."""

from __future__ import annotations

import pytest
from sqlalchemy import func, select

from ira.core.commit import EventDraft, RunCommit
from ira.core.errors import ConcurrentUpdateError
from ira.core.events import RunEventType
from ira.core.states import RunState
from ira.runtime.store import runs
from ira.runtime.store.database import Database
from ira.runtime.store.schema import events
from tests.contracts.test_store import T0, create
from tests.store_fixtures import statements

DRAFTS = (EventDraft(type=RunEventType.RUN_STARTED, data={"note": "naïve ✓", "n": [1, 2.5, None, True]}),
          EventDraft(type=RunEventType.AGENT_TURN, data={"said": "token=AKIAABCDEFGHIJKLMNOP"}),
          EventDraft(type=RunEventType.AGENT_TURN))


async def test_a_commits_events_are_appended_in_order_masked_and_as_drafted(db: Database) -> None:
    run = await create(db)  # its first event is run_seq 1
    with statements(db) as seen:
        async with db.transaction() as conn:
            after = await runs.commit(conn, RunCommit(tenant_id="acme", run_id=run.run_id, expected_version=1,
                                                      state=RunState.RUNNING, events=DRAFTS), at=T0)
    async with db.reader() as conn:
        log = await runs.list_events(conn, "acme", run.run_id)
    assert after.last_seq == 4
    assert [(e.run_seq, e.type, e.at) for e in log[1:]] == [
        (2, RunEventType.RUN_STARTED, T0), (3, RunEventType.AGENT_TURN, T0), (4, RunEventType.AGENT_TURN, T0)]
    assert log[1].data == {"note": "naïve ✓", "n": [1, 2.5, None, True]}
    assert "AKIAABCDEFGHIJKLMNOP" not in str(log[2].data) and log[3].data == {}
    assert len({e.event_id for e in log}) == 4
    # PostgreSQL: one statement for the compare-and-set and its events
    separate = [s for s in seen if s.upper().startswith("INSERT INTO EVENTS")]
    assert len(separate) == (0 if db.engine.dialect.name == "postgresql" else 1)


async def test_a_refused_compare_and_set_appends_no_event(db: Database) -> None:
    run = await create(db)
    async with db.transaction() as conn:
        with pytest.raises(ConcurrentUpdateError):
            await runs.commit(conn, RunCommit(tenant_id="acme", run_id=run.run_id, expected_version=7,
                                              events=DRAFTS), at=T0)
        # read in the refused commit's own transaction, before its rollback
        count = (await conn.execute(select(func.count()).select_from(events).where(
            events.c.run_id == run.run_id))).scalar_one()
        current = await runs.get_run(conn, "acme", run.run_id)
    assert (count, current.last_seq, current.state_version) == (1, 1, 1)
