"""The invariants every fault case must keep, read straight from the store (PostgreSQL).

Each check returns the number of violations (0 = held) and examples for the report:

* ``lost``: alerts answered 202 that never reached triage's table;
* ``duplicated``: an alert identity stored twice, an incident with two runs, a group key with
  two open incidents;
* ``dup_tickets``: more than one ticket for one incident;
* ``unsettled``: runs neither terminal nor in a named wait that someone holds (a live step
  owner, a pending approval, an open work item);
* ``seq_gaps``: runs whose event log is not exactly run_seq 1..n;
* ``neg_budget``: budget accounts where settled + reserved exceeds the limit;
* ``unattempted``: deliveries still pending with no attempt.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

import asyncpg

TERMINAL = ("completed", "failed", "cancelled")
TENANT = "demo"


@dataclass
class Verdict:
    """Violations per invariant, with a few examples each."""

    counts: dict[str, int] = field(default_factory=dict)
    examples: dict[str, list[str]] = field(default_factory=dict)

    def add(self, name: str, found: Iterable[object]) -> None:
        items = [str(f) for f in found]
        self.counts[name] = len(items)
        if items:
            self.examples[name] = items[:3]

    @property
    def held(self) -> bool:
        return not any(self.counts.values())


async def check(database_url: str, accepted: set[str]) -> Verdict:
    conn = await asyncpg.connect(database_url, timeout=10)
    try:
        verdict = Verdict()
        verdict.add("lost", await _lost(conn, accepted))
        verdict.add("duplicated", await _duplicated(conn))
        verdict.add("dup_tickets", await _rows(conn, "SELECT incident_id FROM tickets WHERE tenant_id = $1 "
                                                     "GROUP BY incident_id HAVING count(*) > 1"))
        verdict.add("unsettled", await _unsettled(conn))
        verdict.add("seq_gaps", await _rows(conn, "SELECT run_id FROM events WHERE tenant_id = $1 GROUP BY run_id "
                                                  "HAVING min(run_seq) <> 1 OR max(run_seq) <> count(*)"))
        verdict.add("neg_budget", await _rows(conn, "SELECT run_id || '/' || scope || '/' || dimension "
                                                    "FROM budget_accounts WHERE tenant_id = $1 "
                                                    "AND settled + reserved > limit_amount"))
        verdict.add("unattempted", await _rows(conn, "SELECT notification_id FROM deliveries WHERE tenant_id = $1 "
                                                     "AND state = 'pending' AND attempts = 0"))
        return verdict
    finally:
        await conn.close()


async def progress(database_url: str, accepted: set[str]) -> tuple[int, list[str], int]:
    """(accepted alerts still missing, states of the runs, deliveries not yet attempted)."""
    conn = await asyncpg.connect(database_url, timeout=10)
    try:
        missing = len(await _lost(conn, accepted))
        states = [r["state"] for r in await conn.fetch("SELECT state FROM runs WHERE tenant_id = $1", TENANT)]
        pending = await conn.fetchval("SELECT count(*) FROM deliveries WHERE tenant_id = $1 AND state = 'pending'",
                                      TENANT)
        return missing, states, int(pending)
    except asyncpg.UndefinedTableError:  # the first ira process has not migrated the schema yet
        return len(accepted), [], 0
    finally:
        await conn.close()


async def holds_a_step(database_url: str, owner_suffix: str) -> bool:
    """A process whose worker id ends with ``owner_suffix`` (``:<pid>``) holds a live step claim."""
    conn = await asyncpg.connect(database_url, timeout=10)
    try:
        return bool(await conn.fetchval(
            "SELECT count(*) FROM steps WHERE tenant_id = $1 AND owner LIKE '%' || $2 AND lease_until > now()",
            TENANT, owner_suffix))
    except asyncpg.UndefinedTableError:
        return False
    finally:
        await conn.close()


async def _rows(conn: asyncpg.Connection, sql: str) -> list[object]:
    return [row[0] for row in await conn.fetch(sql, TENANT)]


async def _lost(conn: asyncpg.Connection, accepted: set[str]) -> list[str]:
    stored = {r["event_id"] for r in await conn.fetch(
        "SELECT event_id FROM alerts WHERE tenant_id = $1 AND event_id = ANY($2::text[])", TENANT, list(accepted))}
    return sorted(accepted - stored)


async def _duplicated(conn: asyncpg.Connection) -> list[object]:
    twice = await _rows(conn, "SELECT source_id || '/' || source_event_id FROM alerts WHERE tenant_id = $1 "
                              "GROUP BY source_id, source_event_id HAVING count(*) > 1")
    two_runs = await _rows(conn, "SELECT 'runs of ' || incident_id FROM runs WHERE tenant_id = $1 "
                                 "AND incident_id IS NOT NULL GROUP BY incident_id HAVING count(*) > 1")
    two_open = await _rows(conn, "SELECT 'open ' || group_key FROM incidents WHERE tenant_id = $1 "
                                 "AND closed_at IS NULL GROUP BY group_key HAVING count(*) > 1")
    return [*twice, *two_runs, *two_open]


async def _unsettled(conn: asyncpg.Connection) -> list[object]:
    """Runs not terminal and not in a named wait that a person or a live owner holds."""
    return await _rows(conn, """
        SELECT r.run_id || ':' || r.state || ':' || coalesce(r.wait_kind, '-') FROM runs r
        WHERE r.tenant_id = $1 AND r.state NOT IN ('completed', 'failed', 'cancelled')
          AND NOT (r.state = 'waiting' AND r.wait_kind IS NOT NULL AND (
            EXISTS (SELECT 1 FROM approvals a WHERE a.tenant_id = r.tenant_id AND a.run_id = r.run_id
                    AND a.state = 'pending')
            OR EXISTS (SELECT 1 FROM work_items w WHERE w.tenant_id = r.tenant_id AND w.run_id = r.run_id
                       AND w.state = 'open')
            OR EXISTS (SELECT 1 FROM steps s WHERE s.tenant_id = r.tenant_id AND s.run_id = r.run_id
                       AND s.owner IS NOT NULL AND s.lease_until > now())))""")
