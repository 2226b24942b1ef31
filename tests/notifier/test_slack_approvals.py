"""Approving drafts in Slack: the draft posted, signed clicks decided like the API's, the
message updated — against the fake Slack Web API on 127.0.0.1 (tests/fakes/slack.py)."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest

from ira.connectors.tickets.builtin import BuiltinTicketSystem
from ira.core.states import ApprovalState, DeliveryState, RunState
from ira.runtime.store import runs
from ira.runtime.store.database import Database
from tests.coordinator.harness import auth, incident_update
from tests.coordinator.test_approvals import approval_of, events_of
from tests.fakes.slack import CHANNEL_ID, SIGNING_SECRET
from tests.fakes.slack_interactions import block_actions_body, buttons_of, signed_headers
from tests.notifier.slack_rig import LEAD, STRANGER, VIEWER, SlackRig, slack_rig


async def tickets(rig: SlackRig) -> list[Any]:
    return await BuiltinTicketSystem(rig.deps.db, rig.clock).list_tickets("acme", limit=10)


def texts(message: dict[str, Any]) -> str:
    return json.dumps(message["blocks"])


async def test_the_whole_walk_approved_from_slack_creates_one_ticket_and_updates_the_message(db: Database) -> None:
    async with slack_rig(db) as rig:
        await rig.notify()
        [posted] = rig.approval_posts()
        assert buttons_of(posted)["approve"].startswith(rig.approval_id + "|")
        assert rig.slack.replies(posted["ts"]), "the full report goes into the thread"

        answer = await rig.click(posted)
        await rig.pump.drain()
        await rig.notify()

        [updated] = rig.approval_posts()
        created = await tickets(rig)
        async with db.reader() as conn:
            run = await runs.get_run(conn, "acme", rig.run_id)
    assert answer.status_code == 200
    assert run.state == RunState.COMPLETED and [t.key for t in created] == ["INC-1"]
    assert (await approval_of(db, rig.approval_id)).decided_by == "lead"
    assert updated["ts"] == posted["ts"] and updated.get("edited")
    assert f"Approved by <@{LEAD}> (lead)" in texts(updated) and "INC-1" in texts(updated)
    assert "approve" not in buttons_of(updated), "a decided message has no buttons left"
    assert len(rig.slack.top_level()) == 1, "completion is a thread reply, not another top-level message"


def forged(rig: SlackRig, message: dict[str, Any]) -> tuple[bytes, dict[str, str]]:
    body = rig.click_body(message)
    return body, signed_headers("not-the-secret", body, timestamp=int(rig.clock.now().timestamp()))


def stale(rig: SlackRig, message: dict[str, Any]) -> tuple[bytes, dict[str, str]]:
    body = rig.click_body(message)
    return body, signed_headers(SIGNING_SECRET, body, timestamp=int(rig.clock.now().timestamp()) - 301)


def replayed(rig: SlackRig, message: dict[str, Any]) -> tuple[bytes, dict[str, str]]:
    """A captured request re-sent later with a fresh timestamp (the old one would be stale)."""
    body = rig.click_body(message)
    captured = signed_headers(SIGNING_SECRET, body, timestamp=int(rig.clock.now().timestamp()) - 400)
    return body, {**captured, "x-slack-request-timestamp": str(int(rig.clock.now().timestamp()))}


def tampered(rig: SlackRig, message: dict[str, Any]) -> tuple[bytes, dict[str, str]]:
    """Signed as a viewer's click, then the user id swapped for the lead's."""
    body = rig.click_body(message, user=VIEWER)
    headers = signed_headers(SIGNING_SECRET, body, timestamp=int(rig.clock.now().timestamp()))
    return body.replace(VIEWER.encode(), LEAD.encode()), headers


@pytest.mark.parametrize("attack", [forged, stale, replayed, tampered])
async def test_an_unverifiable_interaction_is_refused_before_parsing(
    db: Database, attack: Callable[[SlackRig, dict[str, Any]], tuple[bytes, dict[str, str]]],
) -> None:
    async with slack_rig(db) as rig:
        await rig.notify()
        [posted] = rig.approval_posts()
        body, headers = attack(rig, posted)
        answer = await rig.client.post("/slack/interactions", content=body, headers=headers)
        metrics = (await rig.client.get("/metrics")).text
    assert (answer.status_code, answer.json()["errors"][0]["code"]) == (401, "invalid_signature")
    assert 'ira_slack_interactions_total{outcome="invalid_signature"} 1.0' in metrics
    assert (await approval_of(db, rig.approval_id)).state == ApprovalState.PENDING
    assert rig.slack.calls_of("chat.update") == [] and await tickets(rig) == []


@pytest.mark.parametrize(("user", "principal", "told"), [
    (STRANGER, f"slack:{STRANGER}", "not mapped to an ira principal"),
    (VIEWER, "viewer", "role_missing"),
])
async def test_a_click_by_someone_who_may_not_approve_is_refused_and_recorded(
    db: Database, user: str, principal: str, told: str,
) -> None:
    async with slack_rig(db) as rig:
        await rig.notify()
        [posted] = rig.approval_posts()
        answer = await rig.click(posted, user=user)
        await rig.pump.drain()
    assert answer.status_code == 200, "Slack shows an error for anything else; the refusal is told ephemerally"
    assert (await approval_of(db, rig.approval_id)).state == ApprovalState.PENDING
    [refused] = await events_of(db, rig.run_id, "APPROVAL_DECISION_REFUSED")
    assert (refused["principal"], refused["code"]) == (principal, "role_missing")
    [ephemeral] = rig.slack.ephemeral
    assert ephemeral["user"] == user and told in ephemeral["text"]
    assert rig.slack.calls_of("chat.update") == [] and await tickets(rig) == []


@pytest.mark.parametrize(("field", "code"), [(1, "draft_changed"), (2, "resource_changed")])
async def test_a_button_value_that_is_not_the_approvals_draft_is_refused(db: Database, field: int, code: str) -> None:
    """The value names this approval but another draft (or incident version): refused, recorded, told."""
    async with slack_rig(db) as rig:
        await rig.notify()
        [posted] = rig.approval_posts()
        parts = buttons_of(posted)["approve"].split("|")
        assert parts[1] == rig.approval.payload_hash and parts[2] == str(rig.approval.resource_version)
        parts[field] = "sha256:" + "0" * 64 if field == 1 else str(int(parts[2]) + 1)
        body = block_actions_body(user=LEAD, action_id="approve", value="|".join(parts), channel=CHANNEL_ID,
                                  message_ts=posted["ts"])
        answer = await rig.click(posted, body=body)
        await rig.pump.drain()
        await rig.notify()
    assert answer.status_code == 200
    assert (await approval_of(db, rig.approval_id)).state == ApprovalState.PENDING
    [refused] = await events_of(db, rig.run_id, "APPROVAL_DECISION_REFUSED")
    assert (refused["principal"], refused["code"]) == ("lead", code)
    [ephemeral] = rig.slack.ephemeral
    assert ephemeral["user"] == LEAD and code in ephemeral["text"] and "latest message" in ephemeral["text"]
    assert rig.slack.calls_of("chat.update") == [] and await tickets(rig) == []


async def test_a_double_click_and_slacks_retry_make_one_decision(db: Database) -> None:
    async with slack_rig(db) as rig:
        await rig.notify()
        [posted] = rig.approval_posts()
        body = rig.click_body(posted, action_ts="1777457000.000100")
        again = rig.click_body(posted, action_ts="1777457000.000900")  # clicked before the message changed
        first = await rig.click(posted, body=body)
        retry_headers = {**signed_headers(SIGNING_SECRET, body, timestamp=int(rig.clock.now().timestamp())),
                         "x-slack-retry-num": "1", "x-slack-retry-reason": "http_timeout"}
        retry = await rig.click(posted, body=body, headers=retry_headers)
        second_click = await rig.click(posted, body=again)
        await rig.pump.drain()
    assert [a.status_code for a in (first, retry, second_click)] == [200, 200, 200]
    assert len(await events_of(db, rig.run_id, "APPROVAL_APPROVED")) == 1
    assert await events_of(db, rig.run_id, "APPROVAL_DECISION_REFUSED") == []
    assert [t.key for t in await tickets(rig)] == ["INC-1"]
    assert rig.slack.ephemeral == [], "a repeated click is the same decision, not an error"


async def test_approve_after_expiry_says_expired_on_the_message(db: Database) -> None:
    async with slack_rig(db) as rig:
        await rig.notify()
        [posted] = rig.approval_posts()
        rig.clock.advance(rig.deps.config.approval_expiry + timedelta(seconds=1))
        answer = await rig.click(posted)  # before the expiry timer fired: the click expires it
        await rig.pump.drain()
        await rig.notify()
        [updated] = rig.approval_posts()
        async with db.reader() as conn:
            run = await runs.get_run(conn, "acme", rig.run_id)
    assert answer.status_code == 200
    assert ":hourglass: Expired" in texts(updated) and "approve" not in buttons_of(updated)
    assert (run.state, run.outcome) == (RunState.FAILED, "approval_expired")
    assert [e["code"] for e in await events_of(db, rig.run_id, "APPROVAL_DECISION_REFUSED")] == ["expired"]
    assert "expired" in rig.slack.ephemeral[0]["text"] and await tickets(rig) == []


async def test_a_revised_draft_edits_the_approval_message_instead_of_posting_another(db: Database) -> None:
    async with slack_rig(db) as rig:
        await rig.notify()
        [old] = rig.approval_posts()
        old_ts, stale_click = old["ts"], rig.click_body(old)  # a screen that still shows the old buttons
        old_button = buttons_of(old)["approve"]
        d = json.loads(rig.pump.deliveries[0].model_dump_json())["payload"]
        posted_before = len(rig.slack.calls_of("chat.postMessage"))
        incident_id = await _incident(db, rig)
        await rig.pump.update(incident_update(rig.run_id, incident_id, 1, version=2, names=("DiskFull",)))
        await rig.pump.drain()
        await rig.notify()
        posted_after = len(rig.slack.calls_of("chat.postMessage"))
        [revised] = rig.approval_posts()
        new_button, edited = buttons_of(revised)["approve"], bool(revised.get("edited"))
        refused = await rig.click(revised, body=stale_click)
        accepted = await rig.click(revised)
        await rig.pump.drain()
        await rig.notify()
    assert d["kind"] == "approval_requested"
    # one message: the revision is a chat.update of it, with the new draft's buttons; no new post
    assert posted_after == posted_before and revised["ts"] == old_ts and edited
    assert old_button.startswith(rig.approval_id + "|") and not new_button.startswith(rig.approval_id + "|")
    assert len(rig.slack.top_level()) == 1
    assert (refused.status_code, accepted.status_code) == (200, 200)
    assert [e["code"] for e in await events_of(db, rig.run_id, "APPROVAL_DECISION_REFUSED")] == ["resource_changed"]
    assert [t.key for t in await tickets(rig)] == ["INC-1"]
    assert all(r["state"] == DeliveryState.ACCEPTED for r in await _deliveries(db, rig))


async def _incident(db: Database, rig: SlackRig) -> str:
    async with db.reader() as conn:
        return (await runs.get_run(conn, "acme", rig.run_id)).incident_id


async def _deliveries(db: Database, rig: SlackRig) -> list[dict[str, Any]]:
    from ira.coordinator import records

    async with db.reader() as conn:
        return await records.list_deliveries(conn, "acme", rig.run_id)


async def test_a_decision_on_the_dashboard_updates_the_slack_message_too(db: Database) -> None:
    async with slack_rig(db) as rig:
        await rig.notify()
        answer = await rig.client.post(f"/v1/approvals/{rig.approval_id}/decision", json={"decision": "reject"},
                                       headers=auth("lead"))
        await rig.pump.drain()
        await rig.notify()
        [updated] = rig.approval_posts()
    assert answer.status_code == 200
    assert f":x: Rejected by <@{LEAD}> (lead)" in texts(updated) and "approve" not in buttons_of(updated)


async def test_an_oversized_interaction_is_refused_unread(db: Database) -> None:
    async with slack_rig(db) as rig:
        body = b"payload=" + b"x" * (300 * 1024)
        answer = await rig.client.post("/slack/interactions", content=body,
                                       headers=signed_headers(SIGNING_SECRET, body,
                                                              timestamp=int(rig.clock.now().timestamp())))
    assert (answer.status_code, answer.json()["errors"][0]["code"]) == (413, "payload_too_large")


async def test_the_answer_does_not_wait_for_slack(db: Database) -> None:
    """Slack wants the answer within 3 s: telling the clicker and opening the reason modal
    happen after it, so a slow Slack Web API never delays it."""
    async with slack_rig(db) as rig:
        await rig.notify()
        [posted] = rig.approval_posts()
        rig.slack.latency = 3.0  # every Web API call now takes 3 s
        answers = []
        for body in (rig.click_body(posted, user=VIEWER), rig.click_body(posted, action="reject")):
            started = time.monotonic()
            answer = await rig.client.post("/slack/interactions", content=body, headers=signed_headers(
                SIGNING_SECRET, body, timestamp=int(rig.clock.now().timestamp())))
            answers.append((answer.status_code, time.monotonic() - started))
        await rig.settled()
    assert all(status == 200 and took < 3.0 for status, took in answers), answers
    assert len(rig.slack.ephemeral) == 1 and len(rig.slack.views) == 1, "the follow-ups ran after the answer"
