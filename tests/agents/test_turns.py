"""A branch's turns are written once: the second writer of a turn lost the step, and finding
that out leaves the transaction usable, on every backend."""

from __future__ import annotations

import pytest

from ira.agents.model import Finish, Turn
from ira.agents.turns import insert_turn, load_turns
from ira.core.errors import StaleEpochError
from ira.core.run import Claim
from ira.runtime.store.database import Database
from tests.contracts.test_store import T0, _claim, create
from tests.store_fixtures import statements


async def test_a_second_writer_of_a_turn_is_refused_without_a_savepoint_and_the_first_stays(db: Database) -> None:
    run = await create(db)
    claim = await _claim(db, run.run_id, "w", T0)
    assert isinstance(claim, Claim)
    first, second = Turn(turn=1, decision=Finish(summary="first")), Turn(turn=1, decision=Finish(summary="second"))
    with statements(db) as seen:
        async with db.transaction() as conn:
            await insert_turn(conn, claim, first, observation_ref=None, at=T0)
            with pytest.raises(StaleEpochError):
                await insert_turn(conn, claim, second, observation_ref=None, at=T0)
            await insert_turn(conn, claim, Turn(turn=2, decision=Finish(summary="next")), observation_ref=None, at=T0)
    assert not [s for s in seen if "SAVEPOINT" in s.upper()]
    async with db.reader() as conn:
        turns = await load_turns(conn, claim)
    assert [(t.turn, t.decision.summary) for t in turns] == [(1, "first"), (2, "next")]  # type: ignore[union-attr]
