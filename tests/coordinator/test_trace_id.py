"""A run remembers the trace of the work that started it, and the run page points at it."""

from __future__ import annotations

from contextlib import nullcontext
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.trace import Span
from pydantic import ValidationError

from ira.runtime.settings.model import TelemetrySettings
from ira.runtime.store.database import Database
from tests.coordinator.harness import api, auth, build, decision, envelope, run_for_incident


async def detail_of_run_decided(db: Database, span: Span | None) -> dict[str, Any]:
    """The API's detail of the run that a decision consumed inside ``span`` (or no span) started."""
    pump, _ = build(db)
    d = decision()
    with trace.use_span(span, end_on_exit=True) if span else nullcontext():
        await pump.decide(envelope(d))
    await pump.drain()
    run = await run_for_incident(db, d.incident_id)
    assert run is not None
    async with api(pump.deps) as client:
        detail = (await client.get(f"/v1/runs/{run.run_id}", headers=auth("viewer"))).json()
        detail["log"] = (await client.get(f"/v1/runs/{run.run_id}/events", headers=auth("viewer"))).json()["events"]
    await pump.close()
    return detail  # type: ignore[no-any-return]


async def test_a_run_keeps_the_trace_of_the_decision_that_started_it(db: Database) -> None:
    # Given a decision consumed inside a span (the bus continues the alert's trace this way)
    span = TracerProvider().get_tracer("test").start_span("process ira.incidents.v1")
    # Then the run's detail carries that trace id
    detail = await detail_of_run_decided(db, span)
    assert detail["trace_id"] == format(span.get_span_context().trace_id, "032x")
    # and only the run says so: no event repeats it
    started = next(e for e in detail["log"] if e["type"] == "RUN_STARTED")
    assert "trace_id" not in started["data"]


async def test_a_run_started_outside_any_trace_has_none(db: Database) -> None:
    assert (await detail_of_run_decided(db, None))["trace_id"] is None


def test_the_trace_link_fills_in_the_trace_id() -> None:
    settings = TelemetrySettings(trace_url="http://127.0.0.1:16686/trace/{trace_id}")
    assert settings.link("4bf92f3577b34da6a3ce929d0e0e4736") == \
        "http://127.0.0.1:16686/trace/4bf92f3577b34da6a3ce929d0e0e4736"
    assert settings.link(None) is None and TelemetrySettings().link("4bf9") is None
    with pytest.raises(ValidationError, match="trace_id"):
        TelemetrySettings(trace_url="http://jaeger/trace/")
