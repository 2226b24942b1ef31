"""One trace per incident, across the real processes of ``ira dev``: the demo alert's ingest,
triage, every step, every tool call, the wait for a person, the ticket Operation and the
deliveries are spans of ONE trace; the decision's own request is linked, not merged. The run
keeps its trace through a kill -9 and a restart while it waits for approval.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest

from ira.infra.demo.bundle import load_bundle
from tests.e2e.devprocess import DevProcess
from tests.eventually import eventually
from tests.otlp import Received, SpanRecord, otlp_receiver
from tests.sources.harness import AM, AM_TOKEN

ADMIN = {"authorization": "Bearer dev-admin-token"}
SECRETS = ("dev-admin-token", "dev-viewer-token", "dev-lead-token")
"""Credentials of the dev config that must never appear in a span."""

EVERY_STEP = ("step metrics", "step logs", "step runbooks", "step join", "step synthesize", "step approve_ticket",
              "step create_ticket", "step complete")


@asynccontextmanager
async def traced_dev(home: Path) -> AsyncIterator[tuple[DevProcess, Received]]:
    """``ira dev --demo`` exporting its spans to a receiver of this test's (which outlives the stop)."""
    with otlp_receiver() as (endpoint, received):
        dev = DevProcess.on(home, command=("dev", "--demo"), OTEL_EXPORTER_OTLP_ENDPOINT=endpoint,
                            OTEL_BSP_SCHEDULE_DELAY="200")
        await dev.start()
        try:
            yield dev, received
        finally:
            await dev.stop()


async def waiting_run(client: httpx.AsyncClient) -> tuple[str, str]:
    """The demo run once it waits for approval: its id and its trace id."""
    async def found() -> dict[str, Any] | None:
        listed = (await client.get("/v1/runs", params={"state": "waiting", "wait_kind": "approval"})).json()["runs"]
        return listed[0] if listed else None

    run = await eventually(found, timeout=120, interval=0.5, message="the demo run waits for approval")
    return run["run_id"], (await client.get(f"/v1/runs/{run['run_id']}")).json()["trace_id"]


async def approve_and_complete(client: httpx.AsyncClient, run_id: str) -> None:
    detail = (await client.get(f"/v1/runs/{run_id}")).json()
    approval = next(a for a in detail["approvals"] if a["state"] == "pending")
    decided = await client.post(f"/v1/approvals/{approval['approval_id']}/decision",
                                json={"decision": "approve", "reason": "trace test"})
    assert decided.status_code == 200, decided.text

    async def completed() -> bool:
        return (await client.get(f"/v1/runs/{run_id}")).json()["state"] == "completed"

    await eventually(completed, timeout=90, interval=0.5, message="the run completes")


async def spans_of(received: Received, trace_id: str, wanted: set[str]) -> list[SpanRecord]:
    """The trace once every wanted span name arrived (exports are batched)."""
    def whole() -> list[SpanRecord] | None:
        spans = received.trace(trace_id)
        return spans if wanted <= {s.name for s in spans} else None

    def missing() -> str:
        return f"missing {sorted(wanted - {s.name for s in received.trace(trace_id)})}"

    try:
        return await eventually(whole, timeout=30, interval=0.3, message="every span of the run's trace")
    except AssertionError as exc:
        raise AssertionError(f"{exc}: {missing()}") from exc


async def post_follow_up(client: httpx.AsyncClient) -> None:
    """A second alert of the demo's group (another instance), firing now: a follow-up."""
    [event] = [e for e in load_bundle().events if e.kind == "alertmanager"]
    payload = json.loads(json.dumps(event.payload))
    [alert] = payload["alerts"]
    alert.update(startsAt=datetime.now(UTC).isoformat().replace("+00:00", "Z"), fingerprint="0a0b0c0d0e0f1011",
                 labels={**alert["labels"], "instance": "order-2"})
    answer = await client.post(AM, json=payload, headers={"authorization": f"Bearer {AM_TOKEN}"})
    assert answer.status_code == 202, answer.text


async def delivered(client: httpx.AsyncClient, run_id: str) -> bool:
    events = (await client.get(f"/v1/runs/{run_id}/events")).json()["events"]
    return any(e["type"] == "INCIDENT_UPDATED" for e in events)


async def approvals_waiting(client: httpx.AsyncClient) -> bool:
    return 'ira_waiting{queue="approvals"} 1.0' in (await client.get("/metrics")).text


def named(spans: list[SpanRecord], prefix: str) -> list[SpanRecord]:
    return [s for s in spans if s.name.startswith(prefix)]


@pytest.mark.timeout(300)
async def test_the_demo_walk_is_one_trace_from_the_webhook_to_the_receipts(tmp_path: Path) -> None:
    async with traced_dev(tmp_path) as (dev, received):
        async with httpx.AsyncClient(base_url=dev.base_url, headers=ADMIN, timeout=10) as client:
            run_id, trace_id = await waiting_run(client)
            await eventually(lambda: approvals_waiting(client), timeout=30, interval=0.5,
                             message="/metrics counts the approval waiting")
            await post_follow_up(client)
            await eventually(lambda: delivered(client, run_id), timeout=60, interval=0.5,
                             message="the follow-up alert reaches the run")
            await approve_and_complete(client, run_id)
            metrics = (await client.get("/metrics")).text
        await dev.stop()  # flushes the last spans
        spans = await spans_of(received, trace_id, {*EVERY_STEP, "approval wait", "ticket operation"})
    # every role's consumers report their lag, parked records and dead letters, the coordinator's included
    for consumer in ("triage", "coordinator", "coordinator-updates", "coordinator-steps", "agents-steps", "notifier"):
        for gauge in ("ira_consumer_lag_messages", "ira_parked_messages", "ira_parked_oldest_age_seconds",
                      "ira_dead_letters"):
            assert f'{gauge}{{consumer="{consumer}"' in metrics, (gauge, consumer)
    names = Counter(s.name for s in spans)
    # the ingest request is the root; triage and the coordinator continue it over Kafka
    [root] = [s for s in spans if not s.parent_span_id]
    assert root.name == "POST /v1/sources/{kind}/{source_id}", names
    assert any("process" in s.name and "alerts" in s.name for s in spans), names
    assert named(spans, "execute_tool"), names
    assert named(spans, "deliver "), names
    assert named(spans, "cas commit") and named(spans, "claim step"), names
    # the person's decision stays its own request's trace, linked from the wait
    [wait] = named(spans, "approval wait")
    assert wait.attributes["ira.approval.outcome"] == "approved" and wait.attributes["ira.approval.decider"]
    assert wait.links and all(t != trace_id for t, _ in wait.links)
    decision = [s for s in received.snapshot() if (s.trace_id, s.span_id) in set(wait.links)]
    assert decision and decision[0].name.startswith("POST /v1/approvals"), [s.name for s in decision]
    # the follow-up alert keeps its own request's trace; the run's trace links to it
    [update] = named(spans, "incident update")
    assert update.links and all(t != trace_id for t, _ in update.links)
    follow_up_trace = update.links[0][0]
    assert {s.name for s in received.trace(follow_up_trace)} >= {"POST /v1/sources/{kind}/{source_id}"}
    [ticket] = named(spans, "ticket operation")
    assert ticket.attributes["ira.operation.path"] == "created"
    every_value = repr([s.attributes for s in received.snapshot()])
    assert not [secret for secret in SECRETS if secret in every_value]


@pytest.mark.timeout(360)
async def test_the_run_keeps_its_trace_through_a_kill_and_restart_while_waiting(tmp_path: Path) -> None:
    async with traced_dev(tmp_path) as (dev, received):
        async with httpx.AsyncClient(base_url=dev.base_url, headers=ADMIN, timeout=10) as client:
            run_id, trace_id = await waiting_run(client)
        dev.kill()  # the whole of ira at once, while the run waits for a person
        await dev.start()
        async with httpx.AsyncClient(base_url=dev.base_url, headers=ADMIN, timeout=10) as client:
            await approve_and_complete(client, run_id)
        await dev.stop()
        spans = await spans_of(received, trace_id, {"approval wait", "step create_ticket", "ticket operation",
                                                    "step complete"})
    assert trace_id and {s.trace_id for s in named(spans, "step create_ticket")} == {trace_id}
