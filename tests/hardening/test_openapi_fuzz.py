"""Schemathesis over the whole OpenAPI of the API, on SQLite and PostgreSQL: 0 × 5xx (issue #16).

Every operation ``/openapi.json`` lists (reads, commands, the webhook lane, operations) is
called with schema-valid and schema-violating inputs, as each of the three principals of the
dev config (viewer, approver, admin), against ira on a real uvicorn on 127.0.0.1. Examples
are bounded and the generation is derandomized (a fixed seed per operation), so a run is
repeatable and takes well under two minutes; any status >= 500 fails with the request.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path

import pytest
import requests
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ira.infra.bundle import load_bundle
from ira.infra.demo import DEMO_BUNDLE
from ira.runtime.platform import Platform
from tests.hardening.harness import ADMIN, APPROVER, VIEWER, bearer, served
from tests.hardening.test_inputs import make_run
from tests.store_fixtures import _drop_schema, open_database, postgres_test_url

PRINCIPALS = (VIEWER, APPROVER, ADMIN)
EXAMPLES = 12
"""Per operation, principal and mode: ~15 operations x 3 x 2 x 12 ≈ 1,100 requests."""
STREAMS = "/events/stream"
"""An SSE stream that opens never ends: a read timeout there means it was served (200)."""


def fuzz_operation(operation: schemathesis.APIOperation, base: str, known: dict[str, str],
                   found: list[str]) -> int:
    """Call ``operation`` with bounded, derandomized examples; record every 5xx in ``found``.

    Half the cases name ``known`` objects (a real run), so inputs reach past the 404 to the
    queries; the other half generate every path parameter. Returns how many calls were made.
    """
    session = requests.Session()
    real = {name: value for name, value in known.items() if f"{{{name}}}" in operation.path}
    strategies = [operation.as_strategy(generation_mode=mode, path_parameters=params)
                  for mode in schemathesis.GenerationMode for params in ({}, real) if params or not real]
    calls = 0

    @settings(max_examples=EXAMPLES * len(PRINCIPALS), derandomize=True, database=None, deadline=None,
              suppress_health_check=list(HealthCheck), print_blob=False)
    @given(case=st.one_of(strategies), token=st.sampled_from(PRINCIPALS))
    def run(case: schemathesis.Case, token: str) -> None:
        nonlocal calls
        calls += 1
        stream = STREAMS in operation.path
        try:
            response = case.call(base_url=base, session=session, headers=bearer(token), timeout=0.5 if stream else 5)
        except requests.ReadTimeout:
            if not stream:
                found.append(f"{case.method} {case.formatted_path}: no answer within 5 s")
            return
        if response.status_code >= 500:
            found.append(f"{case.method} {case.formatted_path} -> {response.status_code}: {case.as_curl_command()}")

    run()
    return calls


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
async def backend(request: pytest.FixtureRequest, platform: Platform, tmp_path: Path) -> AsyncIterator[Platform]:
    """The platform on SQLite, or the same platform on a fresh, migrated PostgreSQL schema."""
    if request.param == "sqlite":
        yield platform
        return
    db, schema = await open_database("postgresql", tmp_path)
    try:
        yield replace(platform, db=db)
    finally:
        await db.close()
        if schema:
            await _drop_schema(postgres_test_url(), schema)


async def test_no_input_makes_a_5xx(backend: Platform) -> None:
    platform = backend
    known = {"run_id": await make_run(platform)}
    async with served(platform) as (base, client):
        spec = (await client.get("/openapi.json")).json()
        schema = schemathesis.openapi.from_dict(spec)
        operations = [result.ok() for result in schema.get_all_operations()]
        assert len(operations) >= 12, "the API's operations are all in the OpenAPI"
        found: list[str] = []
        calls = await asyncio.to_thread(lambda: sum(fuzz_operation(op, base, known, found) for op in operations))
    assert calls >= len(operations) * EXAMPLES
    assert found == [], "\n".join(found[:20])
    print(f"schemathesis: {len(operations)} operations, {calls} calls, 0 x 5xx")


async def test_a_value_the_database_refuses_is_422_not_a_500(backend: Platform) -> None:
    """Found by the fuzzing above: a NUL in a replay's bundle id is stored by SQLite and refused
    by PostgreSQL (SQLSTATE 22...), which was a 500. Now either it is stored or it is a 422 that
    names the reason and does not echo the value."""
    document = load_bundle(DEMO_BUNDLE).document.model_dump(mode="json")
    document["manifest"]["bundle_id"] = "canary\x00bundle"
    async with served(backend) as (_, client):
        response = await client.post("/v1/replays", json=document, headers=bearer(ADMIN))
    if backend.db.engine.dialect.name == "sqlite":
        assert response.status_code == 202, response.text
        return
    assert response.status_code == 422, response.text
    error = response.json()["errors"][0]
    assert error["code"] == "unstorable_value" and "SQLSTATE 22" in error["message"]
    assert "canary" not in response.text
