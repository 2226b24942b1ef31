"""The TicketSystem contract: every implementation must pass it — the builtin service on
SQLite and PostgreSQL, Jira and GitHub through their real adapters against fakes served on
127.0.0.1 (``tests/fakes/``), so neither a fake nor an adapter can drift from the contract.

Faults only an HTTP system has (429, 400, a 5xx) are skipped for the builtin service; a lost
answer is modelled for it by losing the return value of a create that did commit.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import pytest
from sqlalchemy import func, select

from ira.connectors.tickets.builtin import BuiltinTicketSystem
from ira.connectors.tickets.schema import tickets
from ira.connectors.tickets.tenants import remote_ticket_system
from ira.core.clock import FrozenClock
from ira.core.errors import ConnectorRejectedError, ConnectorUnavailableError, StaleEpochError
from ira.core.ports import TicketSystem
from ira.core.ticket import Ticket, TicketRequest
from ira.runtime.store.database import Database
from tests.fakes.github import FakeGitHub
from tests.fakes.jira import FakeJira
from tests.fakes.ticketing import FakeTicketApi
from tests.serving import serve
from tests.store_fixtures import _drop_schema, open_database, postgres_test_url

T0 = datetime(2026, 4, 29, 10, 0, tzinfo=UTC)


class LosingAnswers:
    """The builtin service with a lost answer: the create commits, the caller never hears."""

    def __init__(self, inner: BuiltinTicketSystem) -> None:
        self.inner, self.name, self.lose_next = inner, inner.name, False

    async def create(self, request: TicketRequest, *, idempotency_key: str, namespace: str, epoch: int) -> Ticket:
        ticket = await self.inner.create(request, idempotency_key=idempotency_key, namespace=namespace, epoch=epoch)
        if self.lose_next:
            self.lose_next = False
            raise ConnectorUnavailableError(self.name, "answer lost")
        return ticket

    async def find_by_key(self, tenant_id: str, idempotency_key: str) -> Ticket | None:
        return await self.inner.find_by_key(tenant_id, idempotency_key)

    async def raise_barrier(self, tenant_id: str, namespace: str, epoch: int) -> bool:
        return await self.inner.raise_barrier(tenant_id, namespace, epoch)


@dataclass
class Subject:
    """One implementation under test and the levers to make its remote misbehave."""

    system: TicketSystem
    fake: FakeTicketApi | None = None
    db: Database | None = None

    async def count(self) -> int:
        if self.fake is not None:
            return len(self.fake.issues)
        assert self.db is not None
        async with self.db.reader() as conn:
            return int((await conn.execute(select(func.count()).select_from(tickets))).scalar() or 0)

    def lose_next_answer(self, *, searchable: bool) -> None:
        if self.fake is None:
            assert isinstance(self.system, LosingAnswers)
            self.system.lose_next = True
            return
        self.fake.faults.drop("create")
        self.fake.faults.hide_new = not searchable

    def catch_up(self) -> None:
        if self.fake is not None:
            self.fake.index()

    def remote(self) -> FakeTicketApi:
        if self.fake is None:
            pytest.skip("the builtin service has no HTTP answers to fault")
        return self.fake


@pytest.fixture(params=["builtin-sqlite", pytest.param("builtin-postgresql", marks=pytest.mark.postgres),
                        "jira", "github"])
async def subject(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Subject]:
    clock = FrozenClock(T0)
    if request.param.startswith("builtin"):
        db, schema = await open_database(request.param.removeprefix("builtin-"), tmp_path)
        try:
            yield Subject(LosingAnswers(BuiltinTicketSystem(db, clock)), db=db)
        finally:
            await db.close()
            if schema:
                await _drop_schema(postgres_test_url(), schema)
        return
    fake: FakeTicketApi = FakeJira() if request.param == "jira" else FakeGitHub()
    async with serve(fake) as url:
        yield Subject(remote_ticket_system(fake.tickets(url), clock), fake=fake)


def ticket(title: str = "order-service latency", tenant: str = "acme") -> TicketRequest:
    return TicketRequest(tenant_id=tenant, title=title, body="## Facts\n- p99 up 8x (metrics)", severity="critical",
                         service="order-service", incident_id="inc_1", labels={"run_id": "run_1"})


async def create(subject: Subject, request: TicketRequest | None = None, *, key: str = "k1", namespace: str = "n",
                 epoch: int = 1) -> Ticket:
    return await subject.system.create(request or ticket(), idempotency_key=key, namespace=namespace, epoch=epoch)


async def test_create_is_idempotent_on_key_and_payload(subject: Subject) -> None:
    first = await create(subject)
    again = await create(subject)
    assert again == first and first.payload_hash == ticket().payload_hash()
    assert first.system == subject.system.name and first.title == ticket().title
    assert await subject.system.find_by_key("acme", "k1") == first
    assert await subject.count() == 1


async def test_a_remote_ticket_has_its_url(subject: Subject) -> None:
    fake = subject.remote()
    made = await create(subject)
    expected = {"jira": "browse/OPS-1", "github": "acme/ops/issues/1"}[subject.system.name]
    assert made.key in ("OPS-1", "#1") and made.url is not None and made.url.endswith(expected)
    assert len(fake.calls("create")) == 1


async def test_same_key_with_another_payload_is_refused(subject: Subject) -> None:
    await create(subject)
    with pytest.raises(ConnectorRejectedError, match="another payload"):
        await create(subject, ticket("something else"))
    assert await subject.count() == 1  # a conflict never files a second ticket


async def test_unknown_key_is_not_found(subject: Subject) -> None:
    assert await subject.system.find_by_key("acme", "never-used") is None


async def test_a_lost_answer_leaves_one_ticket_that_reconciliation_adopts(subject: Subject) -> None:
    # Given a create that is applied, but whose answer never arrives (and the search lags behind)
    subject.lose_next_answer(searchable=False)
    with pytest.raises(ConnectorUnavailableError):
        await create(subject)
    # When reconciliation looks the key up once the remote caught up
    subject.catch_up()
    found = await subject.system.find_by_key("acme", "k1")
    # Then it finds the one ticket, and even a repeated create returns it instead of filing another
    assert found is not None and found.payload_hash == ticket().payload_hash()
    assert (await create(subject)).key == found.key
    assert await subject.count() == 1


async def test_a_lost_answer_is_adopted_by_the_create_itself_when_searchable(subject: Subject) -> None:
    fake = subject.remote()
    subject.lose_next_answer(searchable=True)
    made = await create(subject)
    assert await subject.system.find_by_key("acme", "k1") == made
    assert await subject.count() == 1 and len(fake.calls("create")) == 1


async def test_rate_limit_is_waited_out_as_the_remote_asks(subject: Subject) -> None:
    fake = subject.remote()
    fake.faults.fail("create", 429, retry_after="1", message="rate limit exceeded")
    made = await create(subject)
    first, second = fake.calls("create")
    assert second.at - first.at >= 1.0  # Retry-After: 1 honoured before sending again
    assert await subject.system.find_by_key("acme", "k1") == made and await subject.count() == 1


async def test_a_rate_limit_longer_than_the_patience_is_retryable(subject: Subject) -> None:
    fake = subject.remote()
    fake.faults.fail("create", 429, retry_after="3600")
    with pytest.raises(ConnectorUnavailableError) as caught:
        await create(subject)
    assert caught.value.retry_after is not None and caught.value.retry_after.total_seconds() == 3600
    assert len(fake.calls("create")) == 1 and await subject.count() == 0


async def test_a_client_error_is_rejected_with_the_providers_message(subject: Subject) -> None:
    fake = subject.remote()
    fake.faults.fail("create", 400, message="Field 'customfield_10010' cannot be set")
    with pytest.raises(ConnectorRejectedError, match="HTTP 400: Field 'customfield_10010' cannot be set"):
        await create(subject)
    assert len(fake.calls("create")) == 1 and await subject.count() == 0


async def test_a_server_error_on_create_is_never_sent_again(subject: Subject) -> None:
    fake = subject.remote()
    fake.faults.fail("create", 502)
    with pytest.raises(ConnectorUnavailableError, match="HTTP 502"):
        await create(subject)
    assert len(fake.calls("create")) == 1 and await subject.count() == 0


async def test_a_server_error_after_the_create_applied_is_adopted(subject: Subject) -> None:
    fake = subject.remote()
    fake.faults.fail_after_apply("create", 500)
    made = await create(subject)
    assert made.key in ("OPS-1", "#1") and await subject.count() == 1 and len(fake.calls("create")) == 1


async def test_a_server_error_on_a_lookup_is_retried(subject: Subject) -> None:
    fake = subject.remote()
    made = await create(subject)
    fake.faults.fail("search", 503, times=2)
    assert await subject.system.find_by_key("acme", "k1") == made


async def test_a_raised_barrier_refuses_older_epochs(subject: Subject) -> None:
    if not await subject.system.raise_barrier("acme", "run1/create_ticket", 5):
        pytest.skip(f"{subject.system.name} cannot enforce barriers")
    with pytest.raises(StaleEpochError):
        await create(subject, namespace="run1/create_ticket", epoch=4)
    assert await subject.system.find_by_key("acme", "k1") is None  # definitive: nothing older can land
    created = await create(subject, namespace="run1/create_ticket", epoch=5)
    assert created.idempotency_key == "k1"


async def test_a_create_moves_the_barrier_up(subject: Subject) -> None:
    await create(subject, epoch=7)
    if not await subject.system.raise_barrier("acme", "other", 1):
        pytest.skip(f"{subject.system.name} cannot enforce barriers")
    with pytest.raises(StaleEpochError):
        await subject.system.raise_barrier("acme", "n", 6)
    with pytest.raises(StaleEpochError):
        await create(subject, epoch=6)


async def test_barriers_are_per_namespace_and_tenant(subject: Subject) -> None:
    await subject.system.raise_barrier("acme", "run1/create_ticket", 9)
    await create(subject, key="k2", namespace="run2/create_ticket")
    await create(subject, ticket(tenant="globex"), namespace="run1/create_ticket")


async def test_tenants_do_not_share_keys(subject: Subject) -> None:
    ours = await create(subject)
    theirs = await create(subject, ticket(tenant="globex"))
    assert ours.tenant_id == "acme" and theirs.tenant_id == "globex"
    assert await subject.system.find_by_key("globex", "k1") == theirs
    assert await subject.system.find_by_key("acme", "k1") == ours


async def test_concurrent_creates_of_one_key_make_one_ticket(subject: Subject) -> None:
    made = await asyncio.gather(*(create(subject) for _ in range(20)))
    assert len({t.key for t in made}) == 1 and await subject.count() == 1
