"""Reject from Slack with a reason: the click opens a modal, its signed submission is the
decision (through the same decision path as the API), the message says who and why."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest

from ira.core.states import ApprovalState, RunState
from ira.runtime.store import runs
from ira.runtime.store.database import Database
from tests.coordinator.test_approvals import approval_of, events_of
from tests.fakes.slack import SIGNING_SECRET
from tests.fakes.slack_interactions import buttons_of, signed_headers, view_submission_body
from tests.notifier.slack_rig import LEAD, STRANGER, VIEWER, SlackRig, slack_rig

REASON = "duplicate of INC-7, already being handled"


async def test_reject_opens_a_modal_whose_submission_rejects_with_the_reason(db: Database) -> None:
    async with slack_rig(db) as rig:
        await rig.notify()
        [posted] = rig.approval_posts()
        clicked = await rig.click(posted, action="reject")
        pending = (await approval_of(db, rig.approval_id)).state
        [view] = rig.slack.views
        submitted = await rig.submit(view, inputs={"reason": REASON})
        retried = await rig.submit(view, inputs={"reason": REASON})  # Slack's retry of the same submission
        await rig.pump.drain()
        await rig.notify()
        [updated] = rig.approval_posts()
        async with db.reader() as conn:
            run = await runs.get_run(conn, "acme", rig.run_id)
    assert (clicked.status_code, submitted.status_code, retried.status_code) == (200, 200, 200)
    assert pending == ApprovalState.PENDING, "the click only asks why; the submission decides"
    assert view["trigger_id"] == "1.2.3" and view["callback_id"] == "reject_reason"
    rejected = await approval_of(db, rig.approval_id)
    assert (rejected.state, rejected.decided_by, rejected.reason) == (ApprovalState.REJECTED, "lead", REASON)
    assert len(await events_of(db, rig.run_id, "APPROVAL_REJECTED")) == 1
    assert (run.state, run.outcome) == (RunState.FAILED, "approval_rejected")
    shown = json.dumps(updated["blocks"])
    assert f":x: Rejected by <@{LEAD}> (lead)" in shown and REASON in shown
    assert "approve" not in buttons_of(updated)


async def test_when_slack_will_not_open_the_modal_the_draft_is_rejected_without_a_reason(db: Database) -> None:
    async with slack_rig(db) as rig:
        await rig.notify()
        [posted] = rig.approval_posts()
        rig.slack.fail_next("views.open", "error", error="expired_trigger_id")
        answer = await rig.click(posted, action="reject")
    assert answer.status_code == 200 and rig.slack.views == []
    rejected = await approval_of(db, rig.approval_id)
    assert (rejected.state, rejected.decided_by, rejected.reason) == (ApprovalState.REJECTED, "lead", None)
    [told] = rig.slack.ephemeral
    assert told["user"] == LEAD and "expired_trigger_id" in told["text"] and "without a reason" in told["text"]


@pytest.mark.parametrize(("user", "principal", "told"), [
    (STRANGER, f"slack:{STRANGER}", "not mapped"),
    (VIEWER, "viewer", "role_missing"),
])
async def test_a_reject_by_someone_who_may_not_decide_opens_no_modal_and_is_refused(
    db: Database, user: str, principal: str, told: str,
) -> None:
    async with slack_rig(db) as rig:
        await rig.notify()
        [posted] = rig.approval_posts()
        answer = await rig.click(posted, user=user, action="reject")
    assert answer.status_code == 200 and rig.slack.views == []
    assert (await approval_of(db, rig.approval_id)).state == ApprovalState.PENDING
    [refused] = await events_of(db, rig.run_id, "APPROVAL_DECISION_REFUSED")
    assert (refused["principal"], refused["code"], refused["decision"]) == (principal, "role_missing", "reject")
    [ephemeral] = rig.slack.ephemeral
    assert ephemeral["user"] == user and told in ephemeral["text"]


def forged(rig: SlackRig, body: bytes) -> tuple[bytes, dict[str, str]]:
    return body, signed_headers("not-the-secret", body, timestamp=int(rig.clock.now().timestamp()))


def stale(rig: SlackRig, body: bytes) -> tuple[bytes, dict[str, str]]:
    return body, signed_headers(SIGNING_SECRET, body, timestamp=int(rig.clock.now().timestamp()) - 301)


def replayed(rig: SlackRig, body: bytes) -> tuple[bytes, dict[str, str]]:
    captured = signed_headers(SIGNING_SECRET, body, timestamp=int(rig.clock.now().timestamp()) - 400)
    return body, {**captured, "x-slack-request-timestamp": str(int(rig.clock.now().timestamp()))}


def tampered(rig: SlackRig, body: bytes) -> tuple[bytes, dict[str, str]]:
    """Signed with one reason, then the reason rewritten."""
    headers = signed_headers(SIGNING_SECRET, body, timestamp=int(rig.clock.now().timestamp()))
    return body.replace(b"duplicate", b"nonsense!"), headers


@pytest.mark.parametrize("attack", [forged, stale, replayed, tampered])
async def test_a_submitted_reason_is_verified_like_every_interaction(
    db: Database, attack: Callable[[SlackRig, bytes], tuple[bytes, dict[str, str]]],
) -> None:
    async with slack_rig(db) as rig:
        await rig.notify()
        [posted] = rig.approval_posts()
        await rig.click(posted, action="reject")
        [view] = rig.slack.views
        body, headers = attack(rig, view_submission_body(user=LEAD, view=view, inputs={"reason": REASON}))
        answer = await rig.submit(view, inputs={}, body=body, headers=headers)
    assert (answer.status_code, answer.json()["errors"][0]["code"]) == (401, "invalid_signature")
    assert (await approval_of(db, rig.approval_id)).state == ApprovalState.PENDING
    assert await events_of(db, rig.run_id, "APPROVAL_REJECTED") == []
