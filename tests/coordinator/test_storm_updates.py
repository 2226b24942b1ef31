"""A storm of follow-ups, triage and coordinator together on one store (SQLite and PostgreSQL):
the run's log grows with the incident's changes, not with the alerts; the draft is revised at
most once per interval and its approval asked again only when the draft's substance changed.

Triage's handler decides in its own transactions (as its consumer would); the coordinator's
pump takes what both committed to the outbox (run requests, updates, wake-ups) in process.
"""

from __future__ import annotations

import math
from datetime import timedelta

from ira.core.alert import AlertEvent
from ira.core.clock import FrozenClock
from ira.runtime.settings.triage import NoiseSettings, TriageSettings
from ira.runtime.store import runs
from ira.runtime.store.database import Database
from ira.triage.sweep import send_due_updates
from tests.coordinator.harness import T0, build, run_for_incident
from tests.triage.builders import alert, resolved
from tests.triage.harness import ENV, apply, handler

INTERVAL = timedelta(seconds=10)


async def log_of(db: Database, run_id: str) -> list[str]:
    async with db.reader() as conn:
        return [e.type for e in await runs.list_events(conn, "acme", run_id)]


def follow_up(i: int) -> AlertEvent:
    """Follow-up ``i`` of the storm: a new alert of the service; a new alert *name* every 20 of them."""
    return alert(f"Storm{i // 20}", fingerprint=f"fp-{i}", tenant_id="acme", at=T0 + timedelta(seconds=i / 5))


async def test_a_storm_grows_the_run_log_with_changes_and_revises_the_draft_at_most_once_per_interval(
    db: Database,
) -> None:
    # Given one incident (grouped by service) whose run waits for approval of its draft
    clock = FrozenClock(T0)
    pump, _ = build(db, clock=clock)
    triage = handler(clock, TriageSettings(group_by=("service",), update_interval=INTERVAL,
                                           noise=NoiseSettings(enabled=False)))
    opened = await apply(db, triage, alert("Storm0", fingerprint="fp-first", tenant_id="acme", at=T0))
    await pump.drain()
    run = await run_for_incident(db, opened.incident_id or "")
    assert run is not None and run.wait_kind == "approval"
    before = len(await log_of(db, run.run_id))
    # When 300 follow-ups arrive over 60 s (15 new alert names among them), the coordinator keeping up
    n, seconds = 300, 60
    for i in range(0, n, 10):
        for j in range(i, i + 10):
            clock.advance(timedelta(seconds=seconds / n))
            await apply(db, triage, follow_up(j))
        await pump.drain()
    clock.advance(INTERVAL)
    await send_due_updates(db, clock, environment=ENV)
    await pump.drain()
    await pump.close()
    # Then one INCIDENT_UPDATED per update, at most one per interval (the first at once, one swept at the end)
    log = await log_of(db, run.run_id)
    most = math.ceil(seconds / INTERVAL.total_seconds()) + 2
    assert 2 <= log.count("INCIDENT_UPDATED") <= most
    assert log.count("ALERT_DELIVERED") == 0 and len(log) - before <= 5 * most  # not ~n events
    # and the draft moved with its substance, at most once per update, an approval request per draft
    drafts = 1 + log.count("DRAFT_REVISED")
    assert 2 <= drafts <= most
    asked = [d for d in pump.deliveries if d.payload["kind"] == "approval_requested"]
    assert len(asked) == log.count("APPROVAL_REQUESTED") == drafts


async def test_a_flapping_alert_yields_one_run_flapping_decisions_and_one_draft(db: Database) -> None:
    # Given an alert whose run waits for approval, no noise worker (flapping is counted in SQL)
    clock = FrozenClock(T0)
    pump, _ = build(db, clock=clock)
    triage = handler(clock, TriageSettings(update_interval=INTERVAL, noise=NoiseSettings(enabled=False)))
    opened = await apply(db, triage, alert("Flappy", fingerprint="fp-flap", tenant_id="acme", at=T0))
    await pump.drain()
    run = await run_for_incident(db, opened.incident_id or "")
    assert run is not None and run.wait_kind == "approval"
    # When it resolves and fires again a dozen times in ten minutes
    flips = []
    for i in range(12):
        clock.advance(timedelta(seconds=25))
        status = resolved if i % 2 == 0 else alert
        flips.append(await apply(db, triage, status(name="Flappy", fingerprint="fp-flap", tenant_id="acme",
                                                       at=T0 + timedelta(seconds=25 * (i + 1)))))
        await pump.drain()
    await pump.close()
    # Then one run; the flips past the threshold are flapping decisions, with their count as basis
    log = await log_of(db, run.run_id)
    assert log.count("RUN_CREATED") == 1 and [f.reason for f in flips].count("flapping") == 7
    assert all(f.basis["flips"]["transitions"] >= 6 for f in flips if f.reason == "flapping")
    # and the run heard the first five as incident updates, none of which changed the draft: one draft
    assert log.count("INCIDENT_UPDATED") == 5 and log.count("DRAFT_REVISED") == 0
    assert log.count("APPROVAL_REQUESTED") == 1
    assert [d.payload["kind"] for d in pump.deliveries].count("approval_requested") == 1
