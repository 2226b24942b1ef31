"""The supervisor's start and stop: ready only when consumers are assigned; a stop refuses new
requests first, answers the ones inside, drains the duties, and only then stops the loops."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

import httpx
from fastapi import APIRouter, Response

from ira.core.envelope import Envelope, Topic
from ira.runtime.bus.consumer import ConsumerRunner
from ira.runtime.bus.record import RecordMeta
from ira.runtime.duty import enlist
from ira.runtime.platform import Platform
from ira.runtime.supervisor import Supervision, build_http, supervise
from ira.runtime.wiring import build_consumer
from tests.eventually import eventually
from tests.processes import free_port


@dataclass
class ProbeRole:
    """A role with one consumer (a fresh group), a slow endpoint and a duty the test drives."""

    name: str = "probe"
    release: asyncio.Event = field(default_factory=asyncio.Event)
    busy: asyncio.Event = field(default_factory=asyncio.Event)
    stopped: asyncio.Event = field(default_factory=asyncio.Event)
    runner: ConsumerRunner | None = None
    busy_reports: int = 0

    def routers(self, platform: Platform) -> Sequence[APIRouter]:
        router = APIRouter()

        @router.post("/slow")
        async def slow() -> Response:
            await self.release.wait()
            return Response(status_code=202)

        return [router]

    async def run(self, platform: Platform, stop: asyncio.Event) -> None:
        async def ignore(envelope: Envelope, meta: RecordMeta) -> None:
            return None

        self.runner = build_consumer(platform, name="probe", topics=[Topic.RUN_EVENTS], handler=ignore, inbox=False,
                                     group_id=f"probe-{uuid.uuid4().hex[:8]}")
        async with asyncio.TaskGroup() as tasks:
            tasks.create_task(self.runner.run(stop))
            tasks.create_task(self._work(stop))
        self.stopped.set()

    async def _work(self, stop: asyncio.Event) -> None:
        """A duty that is busy while the test holds ``busy`` set."""
        duty = enlist("probe-work")
        duty.ready = True
        while not stop.is_set():
            duty.report(idle=not self.busy.is_set(), done=1 if self.busy.is_set() else 0)
            self.busy_reports += self.busy.is_set()
            await asyncio.sleep(0.05)  # the duty's own pace, not a test's synchronisation
        duty.finished = True


@asynccontextmanager
async def supervised(platform: Platform, role: ProbeRole) -> AsyncIterator[tuple[Supervision, asyncio.Task[int], str]]:
    supervision = Supervision()
    server = build_http(platform, [role], supervision)
    server.config.port = free_port()
    task = asyncio.create_task(supervise(platform, [role], server=server, supervision=supervision))
    try:
        yield supervision, task, f"http://127.0.0.1:{server.config.port}"
    finally:
        role.release.set()
        role.busy.clear()
        supervision.request_stop()
        await asyncio.wait_for(task, 60)


async def readyz(client: httpx.AsyncClient, url: str) -> httpx.Response | None:
    try:
        return await client.get(f"{url}/readyz", timeout=5)
    except httpx.TransportError:
        return None


async def test_readyz_answers_200_only_once_the_consumer_is_assigned(platform: Platform) -> None:
    role = ProbeRole()
    seen: list[int] = []
    async with supervised(platform, role) as (_, _task, url), httpx.AsyncClient() as client:

        async def ready() -> bool:
            answer = await readyz(client, url)
            if answer is not None:
                seen.append(answer.status_code)
                if answer.status_code == 503:
                    assert "roles" in answer.json()["failing"]
            return answer is not None and answer.status_code == 200

        await eventually(ready, timeout=60, interval=0.05, message="/readyz 200")
        consumer = role.runner._consumer if role.runner else None  # noqa: SLF001 - the assignment itself
        assert consumer is not None and consumer.assignment(), "ready before the group assigned partitions"
    assert 503 in seen, "the port opened and answered ready at once: the join was not waited for"


async def test_a_stop_refuses_new_requests_first_answers_those_inside_then_drains(platform: Platform) -> None:
    role = ProbeRole()
    async with supervised(platform, role) as (supervision, task, url), httpx.AsyncClient(timeout=30) as client:
        inside = await _one_request_inside_and_busy(supervision, role, client, url)

        # When a stop is requested
        supervision.request_stop()

        # Then a new request is refused at once with the project's error shape, and readyz says why
        refused = await client.post(f"{url}/slow")
        assert refused.status_code == 503 and refused.headers["Retry-After"] == "5"
        assert refused.json() == {"errors": [{"code": "stopping", "message": "this ira process is stopping; "
                                              "retry later", "field": None}]}
        not_ready = await client.get(f"{url}/readyz")
        assert not_ready.status_code == 503 and "serving" in not_ready.json()["failing"]
        assert (await client.get(f"{url}/healthz")).status_code == 200

        # And the request inside is still answered, while the loops keep running
        role.release.set()
        assert (await inside).status_code == 202
        # the duty reports busy ten more times while the stop waits for it: nothing may stop meanwhile
        seen = role.busy_reports
        await eventually(lambda: role.busy_reports >= seen + 10, timeout=30, message="the duty keeps working")
        assert not task.done() and not role.stopped.is_set()

        # Then the loops stop only once the busy duty went quiet
        role.busy.clear()
        assert await asyncio.wait_for(task, 30) == 0
        assert role.stopped.is_set()


async def test_a_second_stop_signal_stops_at_once(platform: Platform) -> None:
    role = ProbeRole()
    async with supervised(platform, role) as (supervision, task, url), httpx.AsyncClient(timeout=30) as client:
        inside = await _one_request_inside_and_busy(supervision, role, client, url)
        supervision.request_stop()
        supervision.request_stop()
        assert await asyncio.wait_for(task, 15) == 1
        inside.cancel()
        await asyncio.gather(inside, return_exceptions=True)


async def _one_request_inside_and_busy(
    supervision: Supervision, role: ProbeRole, client: httpx.AsyncClient, url: str
) -> asyncio.Task[httpx.Response]:
    """Once ready: one request held inside the gate, and a duty with work to do."""
    await eventually(lambda: _is_ready(client, url), timeout=60, message="/readyz 200")
    inside = asyncio.create_task(client.post(f"{url}/slow"))
    await eventually(lambda: supervision.gate.in_flight == 1, timeout=10, message="request inside")
    role.busy.set()
    return inside


async def _is_ready(client: httpx.AsyncClient, url: str) -> bool:
    answer = await readyz(client, url)
    return answer is not None and answer.status_code == 200
