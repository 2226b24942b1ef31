"""What the endpoint refuses, with which status and error entries: nothing refused reaches the topic."""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator

import httpx
import pytest

from ira.infra.tansu import EmbeddedKafka
from tests.sources.harness import (
    AM,
    AM_TOKEN,
    CHANGE_TOKEN,
    GENERIC_SECRET,
    Harness,
    bearer,
    fixture,
    metric,
    read_topic,
    signed,
)

GENERIC = "/v1/sources/generic/generic"
ONE_MIB = 1024 * 1024
GENERIC_EVENT = {"id": "x-1", "title": "X", "status": "firing", "starts_at": "2026-04-29T10:00:00Z"}


@pytest.fixture
async def client(edge: Harness) -> AsyncIterator[httpx.AsyncClient]:
    async with edge.client() as http:
        yield http


def codes(response: httpx.Response) -> list[str]:
    return [entry["code"] for entry in response.json()["errors"]]


@pytest.mark.parametrize(("path", "headers"), [
    ("/v1/sources/alertmanager/nope", bearer(AM_TOKEN)),      # unknown source
    ("/v1/sources/grafana/am", bearer(AM_TOKEN)),             # a source of another kind
    ("/v1/sources/nagios/am", bearer(AM_TOKEN)),              # no such kind at all
])
async def test_unknown_source_or_kind_is_404(client: httpx.AsyncClient, edge: Harness, path: str,
                                             headers: dict[str, str]) -> None:
    response = await client.post(path, json=fixture("alertmanager_payload.json"), headers=headers)
    assert response.status_code == 404
    assert codes(response) == ["not_found"]
    assert metric(edge.metrics, "ira_source_requests_rejected_total", {"source": "unknown" if "nope" in path else
                                                                       "am", "reason": "not_found"}) == 1


@pytest.mark.parametrize("headers", [
    {},                                           # nothing
    {"authorization": "dev-am-token"},            # no scheme
    {"authorization": "Basic ZGV2LWFtLXRva2Vu"},  # another scheme
    bearer("dev-am-tokeN"),                       # near miss
    bearer(CHANGE_TOKEN),                         # another source's token
])
async def test_missing_or_wrong_bearer_token_is_401(client: httpx.AsyncClient, headers: dict[str, str]) -> None:
    response = await client.post(AM, json=fixture("alertmanager_payload.json"), headers=headers)
    assert response.status_code == 401
    assert response.headers["www-authenticate"] == "Bearer"
    assert codes(response) == ["unauthenticated"]
    assert "dev-am-token" not in response.text


def generic_headers(raw: bytes, case: str) -> dict[str, str]:
    now = time.time()
    return {
        "unsigned": {"content-type": "application/json"},
        "wrong secret": signed(raw, secret="not-the-secret"),
        "six minutes old": signed(raw, at=now - 360),
        "six minutes ahead": signed(raw, at=now + 360),
        "body changed": signed(raw + b" "),
        "timestamp not a number": {**signed(raw), "x-ira-timestamp": "yesterday"},
        "timestamp swapped": {**signed(raw), "x-ira-timestamp": str(int(now) - 1)},
        "bearer instead": bearer(GENERIC_SECRET),
    }[case]


@pytest.mark.parametrize("case", ["unsigned", "wrong secret", "six minutes old", "six minutes ahead", "body changed",
                                  "timestamp not a number", "timestamp swapped", "bearer instead"])
async def test_generic_without_a_valid_fresh_signature_is_401(client: httpx.AsyncClient, case: str) -> None:
    raw = json.dumps(GENERIC_EVENT).encode()
    response = await client.post(GENERIC, content=raw, headers=generic_headers(raw, case))
    assert response.status_code == 401, case


async def test_generic_signed_four_minutes_ago_is_accepted(client: httpx.AsyncClient) -> None:
    raw = json.dumps(GENERIC_EVENT).encode()
    response = await client.post(GENERIC, content=raw, headers=signed(raw, at=time.time() - 240))
    assert response.status_code == 202


async def test_body_over_one_mib_is_413_by_content_length(client: httpx.AsyncClient, edge: Harness,
                                                         kafka: EmbeddedKafka) -> None:
    payload = fixture("alertmanager_payload.json")
    payload["alerts"][0]["annotations"]["description"] = "x" * ONE_MIB
    response = await client.post(AM, json=payload, headers=bearer(AM_TOKEN))
    assert response.status_code == 413
    assert codes(response) == ["payload_too_large"]
    assert await read_topic(kafka.bootstrap, edge.topic) == []


async def test_chunked_body_over_one_mib_is_413_while_reading(client: httpx.AsyncClient) -> None:
    async def chunks() -> AsyncIterator[bytes]:
        for _ in range(20):
            yield b" " * (64 * 1024)  # 1.25 MiB of whitespace, no Content-Length

    response = await client.post(AM, content=chunks(), headers=bearer(AM_TOKEN))
    assert response.status_code == 413


async def test_body_of_exactly_one_mib_is_read(client: httpx.AsyncClient) -> None:
    raw = json.dumps(fixture("alertmanager_payload.json")).encode()
    raw += b" " * (ONE_MIB - len(raw))
    response = await client.post(AM, content=raw, headers=bearer(AM_TOKEN))
    assert response.status_code == 202


@pytest.mark.parametrize("raw", [b"", b"{", b"not json", b'{"alerts": [}', b"\xff\xfe", b'{"a": "\\ud800"}'])
async def test_malformed_json_is_400(client: httpx.AsyncClient, raw: bytes) -> None:
    response = await client.post(AM, content=raw, headers=bearer(AM_TOKEN))
    assert response.status_code == 400
    assert codes(response) == ["malformed_json"]


async def test_schema_problems_are_422_one_entry_per_field(client: httpx.AsyncClient, edge: Harness,
                                                          kafka: EmbeddedKafka) -> None:
    payload = fixture("alertmanager_payload.json")
    alert = payload["alerts"][0]
    alert["status"] = "burning"
    alert["startsAt"] = "2026-11-29T09:26:52"  # no timezone
    alert["labels"]["port"] = 8080
    response = await client.post(AM, json=payload, headers=bearer(AM_TOKEN))
    assert response.status_code == 422
    fields = sorted(entry["field"] for entry in response.json()["errors"])
    assert fields == ["body.alerts.0.labels.port", "body.alerts.0.startsAt", "body.alerts.0.status"]
    assert all(entry["message"] for entry in response.json()["errors"])
    assert await read_topic(kafka.bootstrap, edge.topic) == []


async def test_unknown_fields_in_a_senders_payload_are_ignored_but_refused_in_ours(
    client: httpx.AsyncClient
) -> None:
    payload = fixture("alertmanager_payload.json") | {"someNewField": {"added": "in v0.99"}}
    assert (await client.post(AM, json=payload, headers=bearer(AM_TOKEN))).status_code == 202
    raw = json.dumps(GENERIC_EVENT | {"severty": "critical"}).encode()
    response = await client.post(GENERIC, content=raw, headers=signed(raw))
    assert response.status_code == 422
    assert response.json()["errors"][0]["field"] == "body.severty"


async def test_a_start_time_that_overflows_in_utc_is_422_not_500(client: httpx.AsyncClient) -> None:
    payload = fixture("alertmanager_payload.json")
    payload["alerts"][0]["startsAt"] = "9999-12-31T23:59:59-05:00"
    response = await client.post(AM, json=payload, headers=bearer(AM_TOKEN))
    assert response.status_code == 422
