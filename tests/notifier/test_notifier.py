"""The notifier (C7): signed webhook, receipts per attempt, bounded retries, never the run."""

from __future__ import annotations

import json
import time
from datetime import timedelta

import httpx
import pytest

from ira.core.clock import SystemClock
from ira.core.envelope import Envelope
from ira.core.states import DeliveryState
from ira.notifier import store
from ira.notifier.webhook import NoChannel, WebhookChannel, sign, verify_signature
from ira.notifier.worker import Notifier
from ira.runtime.store import runs
from ira.runtime.store.database import Database
from tests.coordinator.test_approvals import waiting_for_approval
from tests.notifier.receiver import webhook_receiver

SECRET = "hook-secret"


async def approval_request(db: Database) -> tuple[Envelope, str]:
    """A run waiting for approval: its notification is committed, not yet sent."""
    pump, _, _, _, run_id, _ = await waiting_for_approval(db)
    await pump.close()
    [request] = pump.deliveries
    return request, run_id


async def deliver(db: Database, url: str, message: Envelope, *, attempts: int = 3, timeout: float = 2) -> Notifier:
    async with httpx.AsyncClient() as http:
        channel = WebhookChannel(url, SECRET, http, clock=SystemClock(), timeout=timedelta(seconds=timeout))
        notifier = Notifier(db, channel, SystemClock(), max_attempts=attempts, backoff=timedelta(milliseconds=10))
        await notifier.handle(message)
    return notifier


async def delivery(db: Database, message: Envelope) -> dict:
    async with db.reader() as conn:
        row, _ = await store.load(conn, message.tenant_id, message.payload["notification_id"])
    return row


async def test_a_signed_notification_is_accepted_once_and_the_run_is_untouched(db: Database) -> None:
    message, run_id = await approval_request(db)
    async with db.reader() as conn:
        before = await runs.get_run(conn, "acme", run_id)
    async with webhook_receiver() as hook:
        await deliver(db, hook.url, message)
        await deliver(db, hook.url, message)  # a redelivered message: the row says it is done
    row = await delivery(db, message)
    async with db.reader() as conn:
        after = await runs.get_run(conn, "acme", run_id)
    assert len(hook.received) == 1 and row["state"] == DeliveryState.ACCEPTED
    assert [(r["state"], r["detail"]["status"]) for r in row["receipts"]] == [("accepted", 200)]
    got = hook.received[0]
    body = json.loads(got.body)
    assert verify_signature(SECRET, got.headers, got.body, now=time.time())
    assert (body["notification_id"], body["run_id"], body["kind"]) == (
        message.payload["notification_id"], run_id, "approval_requested")
    assert body["run_version"] == before.state_version and body["data"]["decision_path"].startswith("/v1/approvals/")
    assert (after.state, after.state_version) == (before.state, before.state_version)


@pytest.mark.parametrize(("statuses", "state", "seen"), [
    ([500, 502], "accepted", ["failed", "failed", "accepted"]),
    ([400], "failed", ["failed"]),
    ([503, 503, 503, 503], "failed", ["failed", "failed", "failed"]),
])
async def test_retries_are_bounded_and_every_attempt_leaves_a_receipt(
    db: Database, statuses: list[int], state: str, seen: list[str]
) -> None:
    message, run_id = await approval_request(db)
    async with webhook_receiver(statuses) as hook:
        await deliver(db, hook.url, message, attempts=3)
    row = await delivery(db, message)
    assert (row["state"], [r["state"] for r in row["receipts"]]) == (state, seen)
    assert len(hook.received) == len(seen) and row["attempts"] == len(seen)
    assert len({json.loads(r.body)["notification_id"] for r in hook.received}) == 1


async def test_a_timeout_is_unknown_not_failed(db: Database) -> None:
    message, _ = await approval_request(db)
    async with webhook_receiver([0, 0]) as hook:
        await deliver(db, hook.url, message, attempts=2, timeout=0.3)
    row = await delivery(db, message)
    assert (row["state"], [r["state"] for r in row["receipts"]]) == ("unknown", ["unknown", "unknown"])


async def test_without_a_channel_the_delivery_fails_and_the_run_does_not(db: Database) -> None:
    message, run_id = await approval_request(db)
    async with db.reader() as conn:
        before = await runs.get_run(conn, "acme", run_id)
    await Notifier(db, NoChannel(SystemClock()), SystemClock()).handle(message)
    row = await delivery(db, message)
    async with db.reader() as conn:
        after = await runs.get_run(conn, "acme", run_id)
    assert row["state"] == "failed" and row["receipts"][0]["detail"] == {"reason": "no channel configured"}
    assert after == before


def test_signatures_bind_body_secret_and_time() -> None:
    body, now = b'{"notification_id":"n1"}', time.time()
    stamp = str(int(now))
    headers = {"x-ira-timestamp": stamp, "x-ira-signature": sign(SECRET, stamp, body)}
    assert verify_signature(SECRET, headers, body, now=now)
    assert not verify_signature(SECRET, headers, body + b" ", now=now)
    assert not verify_signature("other", headers, body, now=now)
    assert not verify_signature(SECRET, headers, body, now=now + 3600)
