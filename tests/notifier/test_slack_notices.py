"""What else Slack hears about a run: an approval that expired unanswered, a run that needs a
person, and how those land on the run's thread."""

from __future__ import annotations

import json
from datetime import timedelta

from ira.core.states import RunState, WaitKind
from ira.runtime.scanner import Scanner
from ira.runtime.store import runs
from ira.runtime.store.database import Database
from tests.fakes.slack_interactions import buttons_of
from tests.notifier.slack_rig import DASHBOARD, slack_rig


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
