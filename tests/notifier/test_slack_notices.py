"""What else Slack hears about a run: an approval that expired unanswered, a run that needs a
person, and how those land on the run's thread."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

from ira.connectors.tickets.builtin import BuiltinTicketSystem
from ira.coordinator import operations
from ira.coordinator.control import cancel_run
from ira.coordinator.receipt import record_receipt
from ira.core.clock import FrozenClock
from ira.core.states import DeliveryState, RunState, WaitKind
from ira.core.ticket import Ticket
from ira.notifier import store
from ira.runtime.scanner import Scanner
from ira.runtime.store import runs
from ira.runtime.store.database import Database
from tests.coordinator.harness import T0
from tests.coordinator.test_reconcile import OpaqueTickets
from tests.fakes.slack_interactions import buttons_of
from tests.notifier.slack_rig import DASHBOARD, SlackRig, slack_rig
from tests.notifier.test_slack_review import in_manual_repair


async def test_an_approval_that_expires_unanswered_says_so_on_its_message(db: Database) -> None:
    async with slack_rig(db) as rig:
        await rig.notify()
        [posted] = rig.approval_posts()
        rig.clock.advance(rig.deps.config.approval_expiry + timedelta(seconds=1))
        await Scanner(db=db, clock=rig.clock, environment="prod").scan_once()  # the durable expiry timer
        await rig.pump.drain()
        await rig.notify()
        [updated] = rig.approval_posts()
        replies = rig.slack.replies(posted["ts"])
    assert ":hourglass: Expired" in json.dumps(updated["blocks"]) and "approve" not in buttons_of(updated)
    assert any("Approval expired" in r["text"] for r in replies)
    assert len(rig.slack.top_level()) == 1


async def test_a_run_that_needs_a_person_is_announced_with_a_link_to_it(db: Database) -> None:
    async with slack_rig(db, behaviour={"logs": "fail"}) as rig:
        await rig.notify()
        async with db.reader() as conn:
            run = await runs.get_run(conn, "acme", rig.run_id)
        [notice] = rig.slack.top_level()
    assert (run.state, run.wait_kind) == (RunState.WAITING, WaitKind.HUMAN_REVIEW)
    assert "A run needs a person (human_review)" in notice["text"]
    assert "Required branch logs failed" in json.dumps(notice["blocks"])
    links = [e["url"] for b in notice["blocks"] if b["type"] == "actions" for e in b["elements"] if "url" in e]
    assert links == [f"{DASHBOARD}/runs/{rig.run_id}"]


async def slack_receipts(rig: SlackRig) -> dict[str, dict[str, Any]]:
    """Each notification kind of the run -> its delivery row (the last one of that kind)."""
    rows: dict[str, dict[str, Any]] = {}
    async with rig.deps.db.reader() as conn:
        for message in rig.pump.deliveries:
            row, _ = await store.load(conn, message.tenant_id, message.payload["notification_id"])
            rows[str(message.payload["kind"])] = row
    return rows


def accepted_at(row: dict[str, Any]) -> str:
    """The ts Slack gave the post, from an accepted receipt."""
    assert row["state"] == DeliveryState.ACCEPTED, row
    detail = row["receipts"][-1]["detail"]
    assert detail["channel"] == "slack"
    return str(detail["ts"])


async def test_ticket_created_and_run_completed_are_thread_notices_with_receipts(db: Database) -> None:
    async with slack_rig(db) as rig:
        await rig.notify()
        [posted] = rig.approval_posts()
        await rig.click(posted)
        await rig.pump.drain()
        await rig.notify()
        rows = await slack_receipts(rig)
        replies = {m["ts"]: m for m in rig.slack.replies(posted["ts"])}
    completed = replies[accepted_at(rows["run_completed"])]
    assert "Run completed" in completed["text"] and "Ticket INC-1" in json.dumps(completed["blocks"])
    created = replies[accepted_at(rows["ticket_created"])]  # the ticket is news of its own, in the thread
    assert "Ticket INC-1 created" in created["text"]
    assert accepted_at(rows["approval_requested"]) == posted["ts"]


async def test_a_run_that_needs_a_person_has_a_receipt(db: Database) -> None:
    async with slack_rig(db, behaviour={"logs": "fail"}) as rig:
        await rig.notify()
        rows = await slack_receipts(rig)
        [notice] = rig.slack.top_level()
    assert accepted_at(rows["run_needs_human"]) == notice["ts"]


async def test_a_ticket_found_after_the_run_ended_is_announced_in_its_thread(db: Database) -> None:
    """The run was cancelled while its ticket was in doubt; reconciliation then finds it."""
    opaque = OpaqueTickets(BuiltinTicketSystem(db, FrozenClock(T0)))
    async with slack_rig(db, tickets=opaque) as rig:
        await in_manual_repair(rig)
        [root] = rig.approval_posts()
        async with db.transaction() as conn:
            await cancel_run(conn, "acme", rig.run_id, principal="lead", reason="tracker outage",
                             config=rig.deps.config, at=rig.clock.now())
            op = await operations.for_step(conn, "acme", rig.run_id, step_id="create_ticket")
        assert op is not None
        found = Ticket(tenant_id="acme", key="INC-77", idempotency_key=op.idempotency_key,
                       payload_hash=op.payload_hash, title="found later", system="opaque", created_at=rig.clock.now())
        await record_receipt(rig.deps, op, found, adopted=True, epoch=op.owner_epoch)
        await rig.pump.drain()
        await rig.notify()
        rows = await slack_receipts(rig)
        replies = {m["ts"]: m for m in rig.slack.replies(root["ts"])}
    notice = replies[accepted_at(rows["ticket_created"])]
    assert "Ticket INC-77 created" in notice["text"]
