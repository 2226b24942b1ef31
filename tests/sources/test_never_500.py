"""Never a 500 for client input: real payloads, mutated every way a sender could get them wrong.

Each example starts from a real fixture (or a valid generic / change body), then drops keys,
swaps values for other JSON types, huge strings, unicode and nested junk at any depth, or
mangles the bytes. Whatever comes out, the answer is a 2xx or a 4xx in the error shape,
and a 202 always accounts for every event of the request.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from typing import Any

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from tests.sources.harness import AM_TOKEN, CHANGE_TOKEN, GRAFANA_TOKEN, Harness, bearer, fixture, signed

SAMPLES: dict[str, tuple[str, Any]] = {
    "alertmanager firing": ("/v1/sources/alertmanager/am", fixture("alertmanager_payload.json")),
    "alertmanager resolved": ("/v1/sources/alertmanager/am", fixture("alertmanager_payload_resolved.json")),
    "grafana": ("/v1/sources/grafana/grafana", fixture("grafana_webhook_payload.json")),
    "generic": ("/v1/sources/generic/generic", [
        {"id": "db-disk-7", "title": "Disk almost full", "status": "firing", "starts_at": "2026-04-29T10:00:00Z",
         "severity": "critical", "labels": {"service": "db"}, "annotations": {"summary": "97%"},
         "links": [{"url": "https://grafana.example/d/db", "title": "dashboard"}]}]),
    "change": ("/v1/sources/change/changes", {"service": "order-service", "at": "2026-04-29T10:31:00Z",
                                             "version": "v2.14.0", "commit": "9f2c1e4", "actor": "deploy-bot"}),
}
TOKENS = {"am": AM_TOKEN, "grafana": GRAFANA_TOKEN, "changes": CHANGE_TOKEN}

scalars = (st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20)
           | st.sampled_from(["", "firing", "resolved", "0001-01-01T00:00:00Z", "9999-12-31T23:59:59-05:00",
                              "2026-04-29T10:00:00", "not a date", "4", "\u0000", "\U0001f525\u202e"]))
junk = st.recursive(scalars, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner,
                                                                                         max_size=3), max_leaves=8)
replacements = st.one_of(
    junk,
    st.text(max_size=30),                                                      # unicode of every plane
    st.integers(min_value=1_000, max_value=300_000).map(lambda n: "x" * n),    # huge strings
    st.integers(min_value=1, max_value=60).map(lambda depth: _nested(depth)),  # nested junk
)


def _nested(depth: int) -> Any:
    value: Any = "deep"
    for level in range(depth):
        value = {"n": value} if level % 2 else [value]
    return value


def places(node: Any) -> Iterator[tuple[Any, Any]]:
    """Every (container, key) in a JSON document, depth first."""
    items = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else ()
    for key, child in items:
        yield node, key
        yield from places(child)


@st.composite
def mutated_document(draw: st.DrawFn) -> tuple[str, Any]:
    name = draw(st.sampled_from(sorted(SAMPLES)))
    document = {"root": copy.deepcopy(SAMPLES[name][1])}
    for _ in range(draw(st.integers(min_value=1, max_value=3))):
        container, key = draw(st.sampled_from(list(places(document))))
        if draw(st.booleans()) and container is not document:
            container.pop(key)  # drop a key (or a list item)
        else:
            container[key] = draw(replacements)
    return name, document["root"]


@st.composite
def request_body(draw: st.DrawFn) -> tuple[str, bytes]:
    name, document = draw(mutated_document())
    raw = json.dumps(document).encode()
    mangle = draw(st.sampled_from(["none", "none", "truncate", "append", "splice"]))
    if mangle == "truncate":
        raw = raw[: draw(st.integers(min_value=0, max_value=len(raw)))]
    elif mangle == "append":
        raw += draw(st.binary(max_size=20))
    elif mangle == "splice":
        at = draw(st.integers(min_value=0, max_value=len(raw)))
        raw = raw[:at] + draw(st.binary(min_size=1, max_size=8)) + raw[at:]
    return name, raw


def headers_for(path: str, raw: bytes) -> dict[str, str]:
    source = path.rsplit("/", 1)[1]
    return signed(raw) if source == "generic" else {**bearer(TOKENS[source]), "content-type": "application/json"}


@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                  HealthCheck.too_slow])
@given(case=request_body())
async def test_mutated_real_payloads_never_get_a_500(edge: Harness, case: tuple[str, bytes]) -> None:
    name, raw = case
    path = SAMPLES[name][0]
    async with edge.client() as client:
        response = await client.post(path, content=raw, headers=headers_for(path, raw))
    event(f"HTTP {response.status_code}")
    assert response.status_code < 500, (name, raw[:300], response.text[:500])
    body = response.json()
    if response.status_code == 202:
        assert body["accepted"] + body["duplicates"] == len(body["event_ids"])
    else:
        assert response.status_code in (400, 413, 422), response.text[:500]
        assert all(entry["code"] and entry["message"] for entry in body["errors"])
