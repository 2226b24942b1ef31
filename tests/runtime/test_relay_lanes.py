"""The relay's lanes (store level, SQLite and PostgreSQL): a backlog of bulk messages does not
stand before a latency-critical one, and each topic is still relayed oldest first."""

from __future__ import annotations

from datetime import timedelta

from ira.core.clock import FrozenClock
from ira.runtime.store import outbox
from ira.runtime.store.database import Database
from ira.runtime.store.migrate import upgrade
from ira.runtime.wiring import RELAY_LANES
from tests.contracts.test_store import T0
from tests.runtime.test_resend import message
from tests.sqlite_steps import counting_vm_steps

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


async def test_a_lanes_topics_are_claimed_oldest_first_across_them(db: Database) -> None:
    # Given a lane of two topics whose messages were written interleaved
    clock = FrozenClock(T0)
    written = [message(topic=("ira.incidents.v1", "ira.steps.v1")[i % 2], message_id=f"m{i:02}", awaits=None)
               for i in range(12)]
    async with db.transaction() as conn:
        await outbox.enqueue(conn, written, at=T0)
    # When the relay claims 5 at a time
    first, second = await claim(db, clock, 5, LANES), await claim(db, clock, 5, LANES)
    # Then each batch holds the lane's oldest, whichever topic they are on
    assert [name.split("/")[1] for name in first] == [f"m{i:02}" for i in range(5)]
    assert [name.split("/")[1] for name in second] == [f"m{i:02}" for i in range(5, 10)]


async def test_the_catch_all_lane_leases_no_more_rows_than_asked(db: Database) -> None:
    # Given 12 unsent messages on topics in no lane (PostgreSQL ran the old claim's
    # IN (SELECT .. LIMIT n FOR UPDATE SKIP LOCKED) again per updated row, skipping the rows the
    # update had just locked, and leased all 12 for a limit of 5)
    clock = FrozenClock(T0)
    async with db.transaction() as conn:
        await outbox.enqueue(conn, [message(topic="ira.incident-updates.v1", message_id=f"u{i:02}", awaits=None)
                                    for i in range(12)], at=T0)
    # When the relay claims 5, then 5 more, with lanes and without
    first, second = await claim(db, clock, 5, LANES), await claim(db, clock, 5, [])
    # Then each claim leased exactly the 5 oldest left, and the last 2 are still unclaimed
    assert [name.split("/")[1] for name in first] == [f"u{i:02}" for i in range(5)]
    assert [name.split("/")[1] for name in second] == [f"u{i:02}" for i in range(5, 10)]
    async with db.transaction() as conn:
        rest = await outbox.claim_batch(conn, relay_id="r2", now=clock.now(), lease=LEASE, limit=10, lanes=LANES)
    assert [r.message_id for r in rest] == ["u10", "u11"]


async def test_a_lane_with_nothing_unsent_does_not_read_the_other_lanes_backlog(tmp_path) -> None:  # type: ignore[no-untyped-def]
    # Given 3,000 unsent alerts and nothing unsent on the priority lane (SQLite: its VM counts steps)
    db = Database.create(f"sqlite:///{tmp_path / 'ira.db'}")
    await upgrade(db)
    clock = FrozenClock(T0)
    async with db.transaction() as conn:
        await outbox.enqueue(conn, [message(topic="ira.alerts.v1", message_id=f"a{i:04}", awaits=None)
                                    for i in range(3000)], at=T0)
    # When the relay claims 10 of them, the priority lane first
    async with db.transaction() as conn, counting_vm_steps(conn) as steps:
        rows = await outbox.claim_batch(conn, relay_id="r", now=clock.now(), lease=LEASE, limit=10, lanes=LANES)
    await db.close()
    # Then it took the 10 oldest without walking the 3,000 (a walk is ~25 thousand VM instructions)
    assert [r.message_id for r in rows] == [f"a{i:04}" for i in range(10)]
    assert steps.hundreds < 60, steps
