"""Coalesced incident updates at the coordinator: one event per update; the draft and its approval
move only with the draft's substance (a new alert name, a higher severity).

Given/When/Then on SQLite and PostgreSQL, updates handed in as the updates consumer would
(inbox row + update in one transaction).
"""

from __future__ import annotations

from datetime import timedelta

from ira.coordinator import records
from ira.coordinator.intake import open_run_for
from ira.core.alert import Severity
from ira.core.clock import FrozenClock
from ira.core.decision import UpdateTrigger
from ira.core.states import ApprovalState, RunState, WaitKind
from ira.runtime.store.database import Database
from tests.coordinator.harness import KNOWN_ALERT as KNOWN
from tests.coordinator.harness import T0, api, build, decision, envelope
from tests.coordinator.harness import incident_update as update
from tests.coordinator.test_approvals import decide, events_of


async def waiting(db: Database, *, severity: str = "critical"):  # type: ignore[no-untyped-def]
    """A run waiting for approval of its first draft."""
    pump, deps = build(db, clock=FrozenClock(T0))
    d = decision().model_copy(update={"severity": severity})
    await pump.decide(envelope(d))
    await pump.drain()
    async with db.reader() as conn:
        run = await open_run_for(conn, "acme", d.incident_id)
        assert run is not None and (run.state, run.wait_kind) == (RunState.WAITING, WaitKind.APPROVAL)
    return pump, deps, d.incident_id, run.run_id


async def drafts_and_approvals(db: Database, run_id: str):  # type: ignore[no-untyped-def]
    async with db.reader() as conn:
        return (await records.list_drafts(conn, "acme", run_id), await records.list_approvals(conn, "acme", run_id))


async def test_updates_about_known_alerts_are_one_event_each_and_leave_draft_and_approval(db: Database) -> None:
    # Given a run waiting for approval
    pump, deps, incident_id, run_id = await waiting(db)
    # When twenty updates arrive that say more of the same alert fired and resolved
    for seq in range(1, 21):
        await pump.update(update(run_id, incident_id, seq, version=1 + seq * 50, firing=seq % 2))
    await pump.drain()
    drafts, approvals = await drafts_and_approvals(db, run_id)
    async with api(deps) as client:
        approved = await decide(client, approvals[0].approval_id)
        await pump.drain()
    await pump.close()
    # Then the log grew by one event per update, the first draft and its approval stand and still count
    updated = await events_of(db, run_id, "INCIDENT_UPDATED")
    assert [e["seq"] for e in updated] == list(range(1, 21)) and not any(e["substantive"] for e in updated)
    assert len(drafts) == 1 and [a.state for a in approvals] == [ApprovalState.PENDING]
    assert approved.status_code == 200 and len(await events_of(db, run_id, "TICKET_CREATED")) == 1
    assert await events_of(db, run_id, "DRAFT_REVISED") == []


async def test_a_new_alert_name_revises_the_draft_and_asks_for_the_approval_again(db: Database) -> None:
    pump, deps, incident_id, run_id = await waiting(db)
    [old] = (await drafts_and_approvals(db, run_id))[1]
    await pump.update(update(run_id, incident_id, 1, version=7, names=("DiskFull", KNOWN)))
    await pump.update(update(run_id, incident_id, 2, version=9, names=("DiskFull",)))  # nothing new after it
    await pump.drain()
    drafts, approvals = await drafts_and_approvals(db, run_id)
    async with api(deps) as client:
        refused = await decide(client, old.approval_id)
    await pump.close()
    assert (refused.status_code, refused.json()["errors"][0]["code"]) == (409, "resource_changed")
    assert [a.state for a in approvals] == [ApprovalState.INVALIDATED, ApprovalState.PENDING]
    assert [d.incident_version for d in drafts] == [1, 7] and approvals[1].resource_version == 7
    assert [e["substantive"] for e in await events_of(db, run_id, "INCIDENT_UPDATED")] == [True, False]
    [revised] = await events_of(db, run_id, "DRAFT_REVISED")
    assert revised["incident_version"] == 7


async def test_a_raised_severity_revises_the_draft_with_it(db: Database) -> None:
    pump, _, incident_id, run_id = await waiting(db, severity="warning")
    await pump.update(update(run_id, incident_id, 1, version=3, severity=Severity.CRITICAL,
                             trigger=UpdateTrigger.SEVERITY_RAISED))
    await pump.drain()
    await pump.close()
    drafts, approvals = await drafts_and_approvals(db, run_id)
    assert len(drafts) == 2 and [a.state for a in approvals] == [ApprovalState.INVALIDATED, ApprovalState.PENDING]
    [updated] = await events_of(db, run_id, "INCIDENT_UPDATED")
    assert (updated["trigger"], updated["substance"]["severity"], updated["substantive"]) == (
        "severity_raised", "critical", True)


async def test_all_resolved_is_recorded_and_leaves_the_draft(db: Database) -> None:
    pump, _, incident_id, run_id = await waiting(db)
    await pump.update(update(run_id, incident_id, 1, version=2, firing=0, trigger=UpdateTrigger.ALL_RESOLVED))
    await pump.drain()
    await pump.close()
    [updated] = await events_of(db, run_id, "INCIDENT_UPDATED")
    assert (updated["all_resolved"], updated["trigger"], updated["substantive"]) == (True, "all_resolved", False)
    assert len((await drafts_and_approvals(db, run_id))[0]) == 1


async def test_an_update_delivered_twice_is_applied_once(db: Database) -> None:
    pump, _, incident_id, run_id = await waiting(db)
    once = update(run_id, incident_id, 1, version=4, names=("DiskFull",))
    again = once.model_copy(update={"occurred_at": T0 + timedelta(seconds=1)})  # the relay re-published it
    first, second = await pump.update(once), await pump.update(again)
    await pump.drain()
    await pump.close()
    assert (first, second) == (True, False)
    assert len(await events_of(db, run_id, "INCIDENT_UPDATED")) == 1
    assert len((await drafts_and_approvals(db, run_id))[0]) == 2
