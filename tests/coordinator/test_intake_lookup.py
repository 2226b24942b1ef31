"""A decision's lookup of its own run and its incident's open run (``intake._existing``) reads
those runs by their indexes, not every run of the tenant: a start must not get slower with the
tenant's history (SQLite, whose VM counts the steps a statement takes)."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

from sqlalchemy import insert

from ira.coordinator.intake import _existing
from ira.core.states import RunState
from ira.runtime.store.database import Database
from ira.runtime.store.migrate import upgrade
from ira.runtime.store.schema import runs, tasks
from tests.contracts.test_store import T0
from tests.sqlite_steps import counting_vm_steps


def _run(i: int, *, state: RunState = RunState.COMPLETED, incident: str | None = None) -> dict[str, object]:
    return {"tenant_id": "t", "run_id": f"run{i:05}", "task_id": f"task{i:05}", "workflow": "incident@1",
            "environment": "prod", "state": state, "wait_kind": None, "state_version": 1, "last_seq": 0,
            "incident_id": incident or f"inc{i:05}", "contract": {}, "bindings": {}, "outcome": None,
            "idempotency_key": f"evl{i:05}", "created_at": T0 + timedelta(seconds=i),
            "updated_at": T0 + timedelta(seconds=i), "traceparent": None}


async def test_a_decisions_lookup_reads_its_runs_not_the_tenants_history(tmp_path: Path) -> None:
    # Given a tenant with 3,000 ended runs, and an incident with an ended run and an open one
    db = Database.create(f"sqlite:///{tmp_path / 'ira.db'}")
    await upgrade(db)
    rows = [_run(i) for i in range(3000)]
    rows += [_run(3000, incident="inc-x"), _run(3001, state=RunState.WAITING, incident="inc-x")]
    async with db.transaction() as conn:
        await conn.execute(insert(tasks), [{"tenant_id": "t", "task_id": r["task_id"], "kind": "incident",
                                            "subject_ref": "x", "created_at": T0} for r in rows])
        await conn.execute(insert(runs), rows)
    # When a decision with a used key and one for that incident look their runs up
    async with db.transaction() as conn, counting_vm_steps(conn) as steps:
        keyed = await _existing(conn, "t", "evl00007", "inc-new")
        open_one = await _existing(conn, "t", "evl-new", "inc-x")
    await db.close()
    # Then each finds what it asks for without walking the 3,000 (that walk was ~42,000 VM instructions)
    assert keyed[0] is not None and keyed[0].run_id == "run00007" and keyed[1] is None
    assert open_one[0] is None and open_one[1] is not None and open_one[1].run_id == "run03001"
    assert steps.hundreds < 20, steps
