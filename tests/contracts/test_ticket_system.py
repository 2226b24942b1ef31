"""The TicketSystem contract: every implementation must pass it (builtin on SQLite and
PostgreSQL now; the Jira and GitHub adapters against their fakes when they land)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import UTC, datetime

import pytest

from ira.connectors.tickets.builtin import BuiltinTicketSystem
from ira.core.clock import FrozenClock
from ira.core.errors import ConnectorRejectedError, StaleEpochError
from ira.core.ports import TicketSystem
from ira.core.ticket import TicketRequest
from ira.runtime.store.database import Database

T0 = datetime(2026, 4, 29, 10, 0, tzinfo=UTC)


@pytest.fixture(params=["builtin"])
async def system(request: pytest.FixtureRequest, db: Database) -> AsyncIterator[TicketSystem]:
    """One implementation per param; ``db`` already runs each on SQLite and PostgreSQL."""
    yield BuiltinTicketSystem(db, FrozenClock(T0))


def ticket(title: str = "order-service latency", tenant: str = "acme") -> TicketRequest:
    return TicketRequest(tenant_id=tenant, title=title, body="facts and hypotheses", severity="critical",
                         service="order-service", incident_id="inc_1")


async def test_create_is_idempotent_on_key_and_payload(system: TicketSystem) -> None:
    first = await system.create(ticket(), idempotency_key="k1", namespace="run1/create_ticket", epoch=1)
    again = await system.create(ticket(), idempotency_key="k1", namespace="run1/create_ticket", epoch=1)
    assert again == first and first.payload_hash == ticket().payload_hash()
    assert await system.find_by_key("acme", "k1") == first


async def test_same_key_with_another_payload_is_refused(system: TicketSystem) -> None:
    await system.create(ticket(), idempotency_key="k1", namespace="n", epoch=1)
    with pytest.raises(ConnectorRejectedError):
        await system.create(ticket("something else"), idempotency_key="k1", namespace="n", epoch=1)


async def test_unknown_key_is_not_found(system: TicketSystem) -> None:
    assert await system.find_by_key("acme", "never-used") is None


async def test_a_raised_barrier_refuses_older_epochs(system: TicketSystem) -> None:
    if not await system.raise_barrier("acme", "run1/create_ticket", 5):
        pytest.skip(f"{system.name} cannot enforce barriers")
    with pytest.raises(StaleEpochError):
        await system.create(ticket(), idempotency_key="k1", namespace="run1/create_ticket", epoch=4)
    assert await system.find_by_key("acme", "k1") is None  # definitive: nothing older can land
    created = await system.create(ticket(), idempotency_key="k1", namespace="run1/create_ticket", epoch=5)
    assert created.idempotency_key == "k1"


async def test_a_create_moves_the_barrier_up(system: TicketSystem) -> None:
    await system.create(ticket(), idempotency_key="k1", namespace="n", epoch=7)
    with pytest.raises(StaleEpochError):
        await system.raise_barrier("acme", "n", 6)
    with pytest.raises(StaleEpochError):
        await system.create(ticket(), idempotency_key="k1", namespace="n", epoch=6)


async def test_barriers_are_per_namespace_and_tenant(system: TicketSystem) -> None:
    await system.raise_barrier("acme", "run1/create_ticket", 9)
    await system.create(ticket(), idempotency_key="k2", namespace="run2/create_ticket", epoch=1)
    await system.create(ticket(tenant="globex"), idempotency_key="k1", namespace="run1/create_ticket", epoch=1)


async def test_tenants_do_not_share_keys(system: TicketSystem) -> None:
    ours = await system.create(ticket(), idempotency_key="k1", namespace="n", epoch=1)
    theirs = await system.create(ticket(tenant="globex"), idempotency_key="k1", namespace="n", epoch=1)
    assert ours.tenant_id == "acme" and theirs.tenant_id == "globex"
    assert await system.find_by_key("globex", "k1") == theirs


async def test_concurrent_creates_of_one_key_make_one_ticket(system: TicketSystem) -> None:
    made = await asyncio.gather(*(system.create(ticket(), idempotency_key="k1", namespace="n", epoch=1)
                                  for _ in range(20)))
    assert len({t.key for t in made}) == 1
