"""The Slack channel's receipts: a lost answer, Slack's rate limit, a permanent refusal."""

from __future__ import annotations

from ira.core.states import DeliveryState
from ira.notifier import store
from ira.runtime.store.database import Database
from tests.notifier.slack_rig import SlackRig, slack_rig


async def delivery(db: Database, rig: SlackRig, index: int = 0) -> dict:
    message = rig.pump.deliveries[index]
    async with db.reader() as conn:
        row, _ = await store.load(conn, message.tenant_id, message.payload["notification_id"])
    return row


async def test_a_lost_post_message_answer_leaves_exactly_one_message(db: Database) -> None:
    async with slack_rig(db) as rig:
        rig.slack.fail_next("chat.postMessage", "drop")  # Slack posts it; the answer never arrives
        await rig.notify()
        row = await delivery(db, rig)
        posts = rig.approval_posts()
    assert len(posts) == 1 and len(rig.slack.top_level()) == 1
    assert [r["state"] for r in row["receipts"]] == ["unknown", "accepted"]
    assert row["state"] == DeliveryState.ACCEPTED and row["receipts"][1]["detail"]["ts"] == posts[0]["ts"]
    assert rig.slack.calls_of("conversations.history"), "the retry looked for the earlier post first"
    assert [c.answered for c in rig.slack.calls_of("chat.postMessage")][0] is False


async def test_ratelimited_waits_for_retry_after_then_posts_once(db: Database) -> None:
    async with slack_rig(db) as rig:
        rig.slack.fail_next("chat.postMessage", "ratelimited", retry_after=1)
        await rig.notify()
        row = await delivery(db, rig)
        first, second = rig.slack.calls_of("chat.postMessage")[:2]
    assert [r["state"] for r in row["receipts"]] == ["failed", "accepted"]
    assert row["receipts"][0]["detail"] == {"channel": "slack", "error": "ratelimited", "retry_after": 1.0}
    assert second.at - first.at >= 1.0, "the retry honoured Retry-After, not the 10 ms backoff"
    assert len(rig.approval_posts()) == 1


async def test_a_permanent_refusal_fails_at_once_and_says_so(db: Database) -> None:
    async with slack_rig(db) as rig:
        rig.slack.members.clear()  # the bot was removed from the channel
        await rig.notify()
        row = await delivery(db, rig)
    assert row["state"] == DeliveryState.FAILED and row["attempts"] == 1
    assert row["receipts"][0]["detail"] == {"channel": "slack", "error": "not_in_channel", "permanent": True}
    assert rig.slack.posts() == []
