"""The relay's lanes (store level, SQLite and PostgreSQL): a backlog of bulk messages does not
stand before a latency-critical one, and each topic is still relayed oldest first."""

from __future__ import annotations

from datetime import timedelta

from ira.core.clock import FrozenClock
from ira.runtime.store import outbox
from ira.runtime.store.database import Database
from ira.runtime.wiring import RELAY_LANES
from tests.contracts.test_store import T0
from tests.runtime.test_resend import message

LEASE = timedelta(seconds=30)
LANES = [["ira.incidents.v1", "ira.steps.v1"], ["ira.alerts.v1"]]


async def claim(db: Database, clock: FrozenClock, limit: int, lanes: list[list[str]]) -> list[str]:
    async with db.transaction() as conn:
        rows = await outbox.claim_batch(conn, relay_id="r", now=clock.now(), lease=LEASE, limit=limit, lanes=lanes)
        await outbox.mark_sent(conn, relay_id="r", ids=[r.id for r in rows], at=clock.now())
    return [f"{r.topic}/{r.message_id}" for r in rows]


async def test_a_new_run_request_is_relayed_before_a_storms_backlog(db: Database) -> None:
    # Given 50 follow-ups and 20 alerts written before one run request and one wake-up
    clock = FrozenClock(T0)
    backlog = [message(topic="ira.incident-updates.v1", message_id=f"u{i:02}", awaits=None) for i in range(50)]
    alerts = [message(topic="ira.alerts.v1", message_id=f"a{i:02}", awaits=None) for i in range(20)]
    urgent = [message(topic="ira.incidents.v1", message_id="run", awaits=None),
              message(topic="ira.steps.v1", message_id="wake", awaits=None)]
    async with db.transaction() as conn:
        await outbox.enqueue(conn, [*backlog, *alerts, *urgent], at=T0)
    # When the relay claims batches of 10 until nothing is left (bounded)
    batches = []
    for _ in range(20):
        if not (batch := await claim(db, clock, 10, LANES)):
            break
        batches.append(batch)
    claimed = [name for batch in batches for name in batch]
    # Then the run request and the wake-up go in the first batch, before 70 older messages
    assert {"ira.incidents.v1/run", "ira.steps.v1/wake"} <= set(batches[0])
    # and no follow-up goes out while an alert still waits, each topic oldest first, nothing lost
    for i, batch in enumerate(batches):
        if any("incident-updates" in name for name in batch):
            assert sum("alerts" in name for b in batches[:i + 1] for name in b) == 20
    for topic, prefix, count in (("ira.alerts.v1", "a", 20), ("ira.incident-updates.v1", "u", 50)):
        assert [n for n in claimed if n.startswith(topic)] == [f"{topic}/{prefix}{i:02}" for i in range(count)]
    assert len(claimed) == 72


def test_the_platform_relays_run_requests_steps_and_notifications_first() -> None:
    assert {t.value for t in RELAY_LANES[0]} == {"ira.incidents.v1", "ira.steps.v1", "ira.deliveries.v1"}
    assert "ira.incident-updates.v1" not in {t.value for lane in RELAY_LANES for t in lane}
