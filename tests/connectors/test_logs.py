"""Log sources: JSON-lines files (filters, limits, bad lines) and Loki's query_range."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest

from ira.connectors.logs.jsonl import JsonlLogSource
from ira.connectors.logs.loki import LokiLogSource, logql
from ira.core.errors import ConnectorUnavailableError
from ira.core.signals import LogLevel, LogQuery

T0 = datetime(2026, 4, 29, 2, 35, tzinfo=UTC)


def write(path: Path, rows: list[object]) -> None:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))


def query(**kw) -> LogQuery:  # type: ignore[no-untyped-def]
    return LogQuery(**({"service": "order-service", "start": T0, "end": T0 + timedelta(minutes=10)} | kw))


@pytest.fixture
def logs(tmp_path: Path) -> JsonlLogSource:
    write(tmp_path / "a.jsonl", [
        {"ts": "2026-04-29T02:36:00Z", "level": "ERROR", "service": "order-service", "message": "db pool timeout"},
        {"time": "2026-04-29T02:37:00+00:00", "severity": "warn", "service": "order-service", "msg": "slow query"},
        "this line is not json",
        {"ts": "2026-04-29T02:38:00Z", "level": "info", "service": "order-service", "message": "GET /orders 200"},
        {"ts": "2026-04-29T02:39:00Z", "level": "error", "service": "payment-service", "message": "db pool timeout"},
        {"ts": "2026-04-29T03:39:00Z", "level": "error", "service": "order-service", "message": "later"},
        {"level": "error", "service": "order-service", "message": "no time"},
    ])
    write(tmp_path / "b.jsonl", [{"@timestamp": 1777430370, "lvl": "critical", "service": "order-service",
                                   "event": "Out of memory", "pod": "order-7f"}])
    return JsonlLogSource(str(tmp_path / "*.jsonl"))


async def test_jsonl_filters_by_service_window_level_and_text(logs: JsonlLogSource) -> None:
    everything = await logs.search(query())
    assert [line.message for line in everything.lines] == [
        "Out of memory", "GET /orders 200", "slow query", "db pool timeout"]
    assert everything.lines[0].fields == {"pod": "order-7f"} and everything.lines[0].level == LogLevel.CRITICAL
    errors = await logs.search(query(min_level=LogLevel.WARNING))
    assert [line.level for line in errors.lines] == [LogLevel.CRITICAL, LogLevel.WARNING, LogLevel.ERROR]
    assert [line.message for line in (await logs.search(query(text="POOL"))).lines] == ["db pool timeout"]


async def test_jsonl_limit_keeps_the_newest_and_marks_partial(logs: JsonlLogSource) -> None:
    cut = await logs.search(query(limit=2))
    assert cut.partial and cut.total_matched == 4 and [line.message for line in cut.lines] == [
        "Out of memory", "GET /orders 200"]


def loki_answer(request: httpx.Request) -> httpx.Response:
    assert request.url.path == "/loki/api/v1/query_range"
    line = json.dumps({"level": "error", "message": "db pool timeout", "order_id": "ord_1"})
    ns = str(int((T0 + timedelta(minutes=1)).timestamp() * 1e9))
    body = {"status": "success", "data": {"resultType": "streams", "result": [
        {"stream": {"service": "order-service", "level": "error"}, "values": [[ns, line], [ns, "plain text line"]]}]}}
    return httpx.Response(200, json=body)


async def test_loki_query_range_is_parsed_into_lines() -> None:
    async with httpx.AsyncClient(base_url="http://loki.test", transport=httpx.MockTransport(loki_answer)) as client:
        result = await LokiLogSource(client).search(query(min_level=LogLevel.ERROR, text="pool"))
    assert [(line.message, line.level) for line in result.lines] == [
        ("db pool timeout", LogLevel.ERROR), ("plain text line", LogLevel.ERROR)]
    assert result.lines[0].fields == {"order_id": "ord_1"}


def test_logql_quotes_what_it_is_given() -> None:
    built = logql(query(service='order"} or {x="y', text="a.b", min_level=LogLevel.ERROR))
    assert built.startswith('{service="order\\"} or {x=\\"y"}') and '|~ "(?i)a\\\\.b"' in built
    assert "| json | level=~" in built and "warning" not in built


async def test_loki_down_is_retryable() -> None:
    def down(request: httpx.Request) -> httpx.Response:
        return httpx.Response(503, text="overloaded")

    async with httpx.AsyncClient(base_url="http://loki.test", transport=httpx.MockTransport(down)) as client:
        with pytest.raises(ConnectorUnavailableError):
            await LokiLogSource(client).search(query())
