"""What only the builtin ticket service promises: INC-n numbering per tenant, the list."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime

from ira.connectors.tickets.builtin import BuiltinTicketSystem
from ira.connectors.tickets.fault import FaultPointTicketSystem
from ira.core.clock import FrozenClock
from ira.core.ticket import TicketRequest
from ira.runtime.fault import FaultPoints
from ira.runtime.store.database import Database

T0 = datetime(2026, 4, 29, 10, 0, tzinfo=UTC)


def request(n: int, tenant: str = "acme") -> TicketRequest:
    return TicketRequest(tenant_id=tenant, title=f"ticket {n}", body="b", severity="high", incident_id=f"inc_{n}")


async def test_keys_count_up_per_tenant_without_gaps_under_concurrency(db: Database) -> None:
    tickets = BuiltinTicketSystem(db, FrozenClock(T0))
    made = await asyncio.gather(*(tickets.create(request(n), idempotency_key=f"k{n}", namespace=f"n{n}", epoch=1)
                                  for n in range(12)))
    other = await tickets.create(request(0, "globex"), idempotency_key="k0", namespace="n0", epoch=1)
    assert sorted(int(t.key.removeprefix("INC-")) for t in made) == list(range(1, 13))
    assert other.key == "INC-1"


async def test_list_is_tenant_scoped_and_newest_first(db: Database) -> None:
    tickets = BuiltinTicketSystem(db, FrozenClock(T0))
    for n in range(3):
        await tickets.create(request(n), idempotency_key=f"k{n}", namespace="n", epoch=1)
    await tickets.create(request(9, "globex"), idempotency_key="k9", namespace="n", epoch=1)
    listed = await tickets.list_tickets("acme")
    assert [t.key for t in listed] == ["INC-3", "INC-2", "INC-1"]
    assert {t.tenant_id for t in listed} == {"acme"} and listed[0].incident_id == "inc_2"


async def test_the_fault_wrapper_is_transparent_when_unarmed(db: Database) -> None:
    inner = BuiltinTicketSystem(db, FrozenClock(T0))
    wrapped = FaultPointTicketSystem(inner, FaultPoints())
    made = await wrapped.create(request(1), idempotency_key="k1", namespace="n", epoch=1)
    assert await wrapped.find_by_key("acme", "k1") == made and await wrapped.raise_barrier("acme", "n", 2)
