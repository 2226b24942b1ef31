"""A run that needs a person, decided from Slack: the notice offers what the run page offers
(Draft anyway, Retry failed branches; Close with note for a manual repair), done through the
same functions as the HTTP commands, by approvers only."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import pytest

from ira.connectors.tickets.builtin import BuiltinTicketSystem
from ira.coordinator import operations, records
from ira.core.clock import FrozenClock
from ira.core.states import OperationFact, RunState, WaitKind, WorkItemState
from ira.runtime.scanner import Scanner
from ira.runtime.store import runs
from ira.runtime.store.database import Database
from ira.runtime.wakeup import step_wakeup
from tests.coordinator.harness import T0
from tests.coordinator.test_approvals import events_of
from tests.coordinator.test_reconcile import OpaqueTickets
from tests.fakes.slack_interactions import buttons_of
from tests.notifier.slack_rig import LEAD, STRANGER, VIEWER, SlackRig, slack_rig

FAILING = {"logs": "fail"}


async def review_notice(rig: SlackRig) -> dict[str, Any]:
    await rig.notify()
    [notice] = [m for m in rig.slack.posts() if "A run needs a person" in m["text"]]
    return notice


async def item(rig: SlackRig, kind: str) -> dict[str, Any]:
    async with rig.deps.db.reader() as conn:
        [found] = [i for i in await records.list_work_items(conn, "acme", rig.run_id) if i.kind == kind]
        return await records.get_work_item(conn, "acme", found.work_item_id)


async def run_of(rig: SlackRig) -> tuple[RunState, str | None]:
    async with rig.deps.db.reader() as conn:
        run = await runs.get_run(conn, "acme", rig.run_id)
    return run.state, run.wait_kind


async def test_draft_anyway_from_slack_drafts_once_and_the_notice_says_who_chose_it(db: Database) -> None:
    async with slack_rig(db, behaviour=FAILING) as rig:
        notice = await review_notice(rig)
        review = await item(rig, "human_review")
        assert buttons_of(notice) == {"draft_anyway": review["work_item_id"], "retry_failed": review["work_item_id"]}
        body = rig.click_body(notice, action="draft_anyway")
        clicked = await rig.click(notice, body=body)
        retried = await rig.click(notice, body=body)  # Slack's retry of the same click
        await rig.pump.drain()
        await rig.notify()
        closed = await item(rig, "human_review")
        state = await run_of(rig)
        [updated] = [m for m in rig.slack.posts() if m["ts"] == notice["ts"]]
        drafts = rig.approval_posts()
    assert (clicked.status_code, retried.status_code) == (200, 200)
    assert len(await events_of(db, rig.run_id, "REVIEW_DRAFT_ANYWAY")) == 1
    assert (closed["state"], closed["facts"]["decision"], closed["facts"]["decided_by"]) == (
        WorkItemState.CLOSED, "draft_anyway", "lead")
    assert state == (RunState.WAITING, WaitKind.APPROVAL) and len(drafts) == 1, "the draft was written and posted"
    assert buttons_of(updated) == {} and f"Draft anyway: chosen by <@{LEAD}> (lead)" in json.dumps(updated["blocks"])
    assert rig.slack.ephemeral == []


async def test_retry_failed_branches_from_slack_calls_the_same_retry_as_the_api(db: Database) -> None:
    async with slack_rig(db, behaviour=FAILING) as rig:
        notice = await review_notice(rig)
        answer = await rig.click(notice, action="retry_failed")
        closed = await item(rig, "human_review")
        state = await run_of(rig)
    assert answer.status_code == 200
    [retry] = await events_of(db, rig.run_id, "REVIEW_RETRY_BRANCHES")
    assert (retry["principal"], retry["retried"]) == ("lead", ["logs"])
    assert (closed["facts"]["decision"], state[0]) == ("retry", RunState.RUNNING)


@pytest.mark.parametrize(("user", "told"), [(VIEWER, "lacks the approver role"), (STRANGER, "not mapped")])
@pytest.mark.parametrize("action", ["draft_anyway", "retry_failed"])
async def test_only_approvers_may_use_the_review_buttons(db: Database, user: str, told: str, action: str) -> None:
    async with slack_rig(db, behaviour=FAILING) as rig:
        notice = await review_notice(rig)
        answer = await rig.click(notice, user=user, action=action)
        still = await item(rig, "human_review")
        state = await run_of(rig)
    assert answer.status_code == 200
    assert still["state"] == WorkItemState.OPEN and state == (RunState.WAITING, WaitKind.HUMAN_REVIEW)
    [ephemeral] = rig.slack.ephemeral
    assert ephemeral["user"] == user and told in ephemeral["text"]
    assert rig.slack.calls_of("chat.update") == []


async def test_a_second_choice_on_a_settled_review_is_refused_and_said_why(db: Database) -> None:
    async with slack_rig(db, behaviour=FAILING) as rig:
        notice = await review_notice(rig)
        late_body = rig.click_body(notice, action="retry_failed")  # a screen that still shows the buttons
        await rig.click(notice, action="draft_anyway")
        late = await rig.click(notice, body=late_body)
    assert late.status_code == 200
    assert await events_of(db, rig.run_id, "REVIEW_RETRY_BRANCHES") == []
    [ephemeral] = rig.slack.ephemeral
    assert "Not done" in ephemeral["text"] and "not an open review" in ephemeral["text"]


async def in_manual_repair(rig: SlackRig) -> dict[str, Any]:
    """Approved from Slack, the create timed out, could not be verified, and its deadline passed."""
    await rig.notify()
    [posted] = rig.approval_posts()
    await rig.click(posted)
    await rig.pump.drain()
    wake = step_wakeup("acme", rig.run_id, "create_ticket", kind="create_ticket", environment="prod", at=T0).envelope
    await rig.pump.dispatchers[0].handle_wakeup(wake)
    rig.clock.advance(rig.deps.config.operation_deadline + timedelta(seconds=1))
    await Scanner(db=rig.deps.db, clock=rig.clock, environment="prod").scan_once()
    await rig.pump.drain()
    return await review_notice(rig)


async def test_close_with_note_opens_a_modal_whose_submission_closes_the_repair(db: Database) -> None:
    opaque = OpaqueTickets(BuiltinTicketSystem(db, FrozenClock(T0)))
    async with slack_rig(db, tickets=opaque) as rig:
        notice = await in_manual_repair(rig)
        repair = await item(rig, "manual_repair")
        assert buttons_of(notice) == {"close_repair": repair["work_item_id"]}
        refused = await rig.click(notice, user=VIEWER, action="close_repair")
        assert rig.slack.views == [], "a viewer gets no dialog"
        await rig.click(notice, action="close_repair")
        [view] = rig.slack.views
        too_short = await rig.submit(view, inputs={"note": "ok"})
        closing = await rig.submit(view, inputs={"note": "INC-77 exists in the tracker, created 10:41",
                                                 "external_ref": "INC-77"})
        await rig.pump.drain()
        async with db.reader() as conn:
            op = await operations.for_step(conn, "acme", rig.run_id, step_id="create_ticket")
        state = await run_of(rig)
    assert refused.status_code == 200 and "lacks the approver role" in rig.slack.ephemeral[0]["text"]
    assert view["callback_id"] == "close_repair"
    assert f"Look it up: `{repair['facts']['suggested_query']}`" in json.dumps(view["blocks"])
    assert too_short.json()["response_action"] == "errors", "Slack shows the error in the dialog"
    assert closing.status_code == 200
    assert (op.fact_state, op.external_ref) == (OperationFact.CONFIRMED_SUCCESS, "INC-77")
    [closed] = await events_of(db, rig.run_id, "MANUAL_REPAIR_CLOSED")
    assert closed["principal"] == "lead"
    assert state[0] == RunState.COMPLETED, "the run resumed from the person's fact"
    assert "Manual repair closed" in rig.slack.ephemeral[-1]["text"]
