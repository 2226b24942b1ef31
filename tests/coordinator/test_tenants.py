"""200 concurrent incidents in two tenants, on the real broker: all complete with one ticket
each, and no API response of one tenant names anything of the other.

Runs on SQLite only (it passes on PostgreSQL too, in ~100 s on two cores); tenant scoping of
every query is also covered on both backends by test_approvals and the ticket contract."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from ira.infra.tansu import EmbeddedKafka
from ira.runtime.store.database import Database
from tests.coordinator.harness import api, auth, decision, envelope
from tests.coordinator.live import live_stack
from tests.eventually import eventually

PER_TENANT = 100
TENANTS = {"acme": "admin", "globex": "other"}


async def runs_in(client: httpx.AsyncClient, who: str, **query: str) -> list[dict]:
    answer = await client.get("/v1/runs", headers=auth(who), params={"limit": "500", **query})
    assert answer.status_code == 200
    return answer.json()["runs"]


async def approve_all(client: httpx.AsyncClient, who: str) -> list[httpx.Response]:
    """Every waiting run of the caller's tenant, approved through the API (as a person would)."""
    waiting = await runs_in(client, who, state="waiting", wait_kind="approval")
    details = await asyncio.gather(*(client.get(f"/v1/runs/{r['run_id']}", headers=auth(who)) for r in waiting))
    pending = [a["approval_id"] for d in details for a in d.json()["approvals"] if a["state"] == "pending"]
    return list(await asyncio.gather(*(client.post(f"/v1/approvals/{a}/decision", headers=auth(who),
                                                   json={"decision": "approve"}) for a in pending)))


@pytest.mark.slow
@pytest.mark.parametrize("db", ["sqlite"], indirect=True)  # ~75 s here; the store-level parts run on both
async def test_two_hundred_incidents_in_two_tenants_complete_without_leaks(
    db: Database, kafka: EmbeddedKafka, bus_env: str
) -> None:
    decisions = {t: [decision(t) for _ in range(PER_TENANT)] for t in TENANTS}
    responses: dict[str, list[str]] = {t: [] for t in TENANTS}
    async with live_stack(db, bootstrap=kafka.bootstrap, environment=bus_env) as stack, api(stack.deps) as client:
        await asyncio.gather(*(stack.publish(envelope(d)) for ds in decisions.values() for d in ds))

        async def all_waiting() -> bool:
            counts = [len(await runs_in(client, who, state="waiting")) for who in TENANTS.values()]
            return counts == [PER_TENANT, PER_TENANT]

        await eventually(all_waiting, timeout=240, interval=0.5, message="200 runs waiting for approval")
        for tenant, who in TENANTS.items():
            answers = await approve_all(client, who)
            assert [a.status_code for a in answers] == [200] * PER_TENANT
            responses[tenant] += [a.text for a in answers]

        async def all_completed() -> bool:
            counts = [len(await runs_in(client, who, state="completed")) for who in TENANTS.values()]
            return counts == [PER_TENANT, PER_TENANT]

        await eventually(all_completed, timeout=240, interval=0.5, message="200 runs completed")
        for tenant, who in TENANTS.items():
            listed = await runs_in(client, who)
            details = await asyncio.gather(*(client.get(f"/v1/runs/{r['run_id']}", headers=auth(who))
                                             for r in listed))
            events = await asyncio.gather(*(client.get(f"/v1/runs/{r['run_id']}/events", headers=auth(who))
                                            for r in listed))
            tickets = await client.get("/v1/tickets", headers=auth(who), params={"limit": "500"})
            responses[tenant] += [x.text for x in (*details, *events, tickets)]
            responses[tenant].append(str(listed))
            keys = sorted(int(t["key"].removeprefix("INC-")) for t in tickets.json()["tickets"])
            assert keys == list(range(1, PER_TENANT + 1))
            assert {t["tenant_id"] for t in tickets.json()["tickets"]} == {tenant}
            assert {r["incident_id"] for r in listed} == {d.incident_id for d in decisions[tenant]}
        other_runs = {t: [r["run_id"] for r in await runs_in(client, who)] for t, who in TENANTS.items()}
        crossed = await asyncio.gather(*(client.get(f"/v1/runs/{run_id}", headers=auth("admin"))
                                         for run_id in other_runs["globex"][:20]))
    assert {c.status_code for c in crossed} == {404}
    for tenant, other in (("acme", "globex"), ("globex", "acme")):
        foreign = set(other_runs[other]) | {d.incident_id for d in decisions[other]}
        text = "\n".join(responses[tenant])
        assert not [x for x in foreign if x in text], f"{tenant} responses name {other} objects"
