"""A run remembers the trace of the work that started it, and the run page points at it."""

from __future__ import annotations

import pytest
from opentelemetry.sdk.trace import TracerProvider
from pydantic import ValidationError

from ira.runtime.settings.model import TelemetrySettings
from ira.runtime.store.database import Database
from tests.coordinator.harness import api, auth, build, decision, envelope, run_for_incident


async def test_a_run_keeps_the_trace_of_the_decision_that_started_it(db: Database) -> None:
    # Given a decision consumed inside a span (the bus continues the alert's trace this way)
    pump, _ = build(db)
    d = decision()
    with TracerProvider().get_tracer("test").start_as_current_span("process ira.decisions.v1") as span:
        await pump.decide(envelope(d))
    await pump.drain()
    run = await run_for_incident(db, d.incident_id)
    assert run is not None
    # Then the run's detail carries that trace id
    async with api(pump.deps) as client:
        detail = (await client.get(f"/v1/runs/{run.run_id}", headers=auth("viewer"))).json()
    await pump.close()
    assert detail["trace_id"] == format(span.get_span_context().trace_id, "032x")


async def test_a_run_started_outside_any_trace_has_none(db: Database) -> None:
    pump, _ = build(db)
    d = decision()
    await pump.decide(envelope(d))
    await pump.drain()
    run = await run_for_incident(db, d.incident_id)
    assert run is not None
    async with api(pump.deps) as client:
        detail = (await client.get(f"/v1/runs/{run.run_id}", headers=auth("viewer"))).json()
    await pump.close()
    assert detail["trace_id"] is None


def test_the_trace_link_fills_in_the_trace_id() -> None:
    settings = TelemetrySettings(trace_url="http://127.0.0.1:16686/trace/{trace_id}")
    assert settings.link("4bf92f3577b34da6a3ce929d0e0e4736") == \
        "http://127.0.0.1:16686/trace/4bf92f3577b34da6a3ce929d0e0e4736"
    assert settings.link(None) is None and TelemetrySettings().link("4bf9") is None
    with pytest.raises(ValidationError, match="trace_id"):
        TelemetrySettings(trace_url="http://jaeger/trace/")
